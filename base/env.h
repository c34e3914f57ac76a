// The environment as a function, so that every layer reads variables through one seam and tests
// pass a map instead of calling setenv.
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtl {

/// Looks up an environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// Variables to set, in order: "KEY", "VALUE".
using EnvPairs = std::vector<std::pair<std::string, std::string>>;

/// The process environment, for the real binary.
inline EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace dtl
