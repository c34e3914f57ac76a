// Worker output to the console: whole lines only, each with the worker's prefix ("[default0]:"),
// so lines from different workers never tear or interleave. A '\r' ends a piece too, so progress
// bars (tqdm redraws its line after '\r') show as they advance instead of at the next newline.
#pragma once

#include <string>
#include <string_view>

namespace dtl::launcher {

class LinePrefixer {
 public:
  /// A line longer than `max_line` bytes is cut there (and continues, prefixed, on the next line),
  /// so a worker that never prints a newline cannot make dtlaunch's memory grow without bound.
  explicit LinePrefixer(std::string prefix, size_t max_line = 1 << 20);

  /// Appends every line completed by `chunk` to `out`, prefixed and with its '\n'.
  void feed(std::string_view chunk, std::string& out);

  /// Appends the unterminated last line, if any, with a '\n' added (at end of stream).
  void finish(std::string& out);

 private:
  std::string prefix_;
  std::string partial_;
  size_t max_line_;
};

/// torchrun's --log_line_prefix_template with ${role_name}, ${local_rank}, ${rank}, ${hostname}.
std::string expand_prefix(const std::string& tmpl, const std::string& role, int local_rank, int rank,
                          const std::string& hostname = "");

inline constexpr const char* kDefaultPrefixTemplate = "[${role_name}${local_rank}]:";

}  // namespace dtl::launcher
