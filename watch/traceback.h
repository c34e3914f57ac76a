// A Python traceback as a rank's last word: the rank that printed one and lives on (an atexit
// handler that blocks, a thread that keeps the process up) is the hung one, and its traceback is
// the root cause. Pure: fed the rank's output as it comes.
#pragma once

#include <string>
#include <string_view>

namespace dtl::watch {

class TracebackCatcher {
 public:
  /// A piece of the rank's stderr, as read (lines may be cut anywhere).
  void feed(std::string_view chunk);
  /// The rank printed something else (its stdout): a traceback before it is no longer its last word.
  void other_output(std::string_view chunk);
  /// The traceback, from "Traceback (most recent call last):" (or the first of a chain) to its
  /// exception's lines, when it is the last thing the rank printed; empty otherwise. At most about
  /// 32 KiB: a longer one keeps its head and its tail.
  const std::string& last() const { return last_; }
  /// Nothing printed before counts (a new attempt, or other output after it).
  void reset();

 private:
  void line(std::string_view text);
  enum class Phase { outside, frames, exception } phase_ = Phase::outside;
  bool chained_ = false;  ///< the lines that lead to the next traceback of a chain were read
  std::string partial_;   ///< the line being read, cut at 4 KiB
  std::string text_;      ///< the traceback being read
  std::string last_;
};

}  // namespace dtl::watch
