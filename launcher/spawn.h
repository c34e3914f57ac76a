// Starting one worker: fork + exec with everything a supervised child needs set in between
// (own process group, death signal tied to dtlaunch, default signal handling, the given fds).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtl::launcher {

struct SpawnSpec {
  std::string path;               ///< absolute or relative path to exec (no PATH search)
  std::vector<std::string> argv;  ///< argv[0] included
  std::vector<std::string> env;   ///< "KEY=VALUE" entries, the whole environment
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// Starts the process in a new process group of its own (pgid == pid), with PR_SET_PDEATHSIG
/// SIGKILL so it cannot outlive dtlaunch. Throws std::system_error when fork fails; a failed exec
/// shows up as the child exiting 127 after printing why on its stderr.
pid_t spawn_worker(const SpawnSpec& spec);

/// PATH lookup as execvp does it, for an executable regular file. A name with a '/' is checked as
/// given. Returns the path to exec.
std::optional<std::string> find_executable(const std::string& name, const std::string& path_env);

/// Whether anything is at `path` (access F_OK).
bool path_exists(const std::string& path);

}  // namespace dtl::launcher
