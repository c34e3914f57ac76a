// One setting between the command line and its parser: its text and where it came from, and the
// error that names it. Shared by command_line.cc and accelerate_line.cc (not a public header).
#pragma once

#include <string>
#include <vector>

#include "base/error.h"
#include "config/flags.h"
#include "config/launch_options.h"
#include "base/printable.h"

namespace dtl::config {

/// One setting's text and where it came from, before it is parsed.
struct Resolved {
  const Flag* flag;
  std::string text;
  Source source;
};

/// The failed Result that names setting `s`: "--tee: expected 0-3 ... (got '4')", or a file's
/// "cfg.yaml:3:6: tee: expected 0-3 ..., got '4'".
inline tl::unexpected<Error> value_error(const Resolved& s, const std::string& what) {
  std::string msg = s.source.where + ": " + what;
  if (!s.text.empty() && what.rfind("expected", 0) == 0) {
    if (s.source.kind == Source::Kind::file) {
      msg += ", got '" + printable(s.text) + "'" + (s.source.note.empty() ? "" : " (" + s.source.note + ")");
    } else {
      msg += " (got '" + printable(s.text) + "')";
    }
  }
  return fail(msg);
}

inline Resolved& row(std::vector<Resolved>& settings, Setting id) { return settings[static_cast<size_t>(id)]; }
inline const Resolved& row(const std::vector<Resolved>& settings, Setting id) { return settings[static_cast<size_t>(id)]; }

}  // namespace dtl::config
