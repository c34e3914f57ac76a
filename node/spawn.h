// Starting one worker: fork + exec with everything a supervised child needs set in between
// (own session and process group, the job's cgroup, death signal tied to dtlaunch, default signal
// handling, the given fds, the CPUs it may use).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtl::node {

struct SpawnSpec {
  std::string path;               ///< absolute or relative path to exec (no PATH search)
  std::vector<std::string> argv;  ///< argv[0] included
  std::vector<std::string> env;   ///< "KEY=VALUE" entries, the whole environment
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cgroup_fd = -1;        ///< the job cgroup's directory, which the child starts in; -1: none
  int cgroup_procs_fd = -1;  ///< its cgroup.procs, to move in where clone3 cannot start it there
  std::vector<int> cpus{};   ///< the CPUs it may run on (--numa_binding); empty: dtlaunch's own
  int* pidfd = nullptr;  ///< where to put a pidfd of the child (CLONE_PIDFD), or -1 where none could be had
};

/// Starts the process in a new session, and so process group, of its own (sid == pgid == pid), as
/// torchrun does (`start_new_session=True`), with PR_SET_PDEATHSIG SIGKILL so it cannot outlive
/// dtlaunch. Until the child has called setsid, its group does not exist: signal it with
/// `signal_worker`. Throws std::system_error when fork fails; a failed exec shows up as the child
/// exiting 127 after printing why on its stderr.
pid_t spawn_worker(const SpawnSpec& spec);

/// Sends `sig` to the worker's process group, or to the worker itself if it has not made that group
/// yet (the signal then waits, blocked, until the child's handlers are reset before exec).
void signal_worker(pid_t worker, int sig);

}  // namespace dtl::node
