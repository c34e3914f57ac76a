// The environment and the disk as the config tests give them: maps, with no setenv and no files.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "config/command_line.h"

namespace dtl::test {

/// An environment holding only `vars`.
inline dtl::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

/// A disk that holds only these files.
inline config::ReadFile files_of(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> config::FileRead {
    auto it = files.find(path);
    if (it == files.end()) return {config::FileRead::Status::missing, "No such file or directory"};
    return {config::FileRead::Status::ok, it->second};
  };
}

}  // namespace dtl::test
