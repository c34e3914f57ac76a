// A helper program dtlaunch runs and reads while the job goes on (a stack reader: py-spy, eu-stack),
// bounded in every way it could hold dtlaunch up: a deadline, a cap on what it prints, a way to
// cancel it, a death signal, and the job's cgroup. Once killed it is waited for a second at most,
// never more. dtlaunch, a child subreaper, reaps every child it has with waitpid(-1); the exit status
// of a helper reaped so is handed back here (handed_exit).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dtl::node {

struct BoundedRun {
  std::vector<std::string> argv;  ///< argv[0] is the program's path (no PATH search)
  std::chrono::milliseconds timeout{10000};
  size_t output_cap = 8 << 20;  ///< stdout beyond this ends the run
  int cancel_fd = -1;           ///< readable: the run ends now (an eventfd written by whoever stops it)
  int cgroup_fd = -1;           ///< the job cgroup's directory, or -1
  int cgroup_procs_fd = -1;
};

struct BoundedOutput {
  enum class End {
    exited,       ///< `code` is its exit code
    signalled,    ///< `code` is the signal that ended it
    timed_out,    ///< killed at the deadline
    too_much,     ///< killed once its output passed the cap
    cancelled,    ///< killed because cancel_fd became readable
    not_started,  ///< `error` says why
  };
  End end = End::not_started;
  int code = 0;
  std::string output;  ///< its stdout, at most the cap
  std::string error;   ///< the first line of its stderr, or why it did not start
};

/// Runs the program in a process group of its own and reads it to its end. Whatever ends the run
/// early kills the whole group with SIGKILL.
BoundedOutput run_bounded(const BoundedRun& run);

/// For whoever reaps children with waitpid(-1): the status of a child that is not its own, which a
/// bounded run may be waiting for. The last 256 are kept.
void handed_exit(pid_t pid, int status);

/// "exited 1: <its first error line>", "timed out after 10 s", ... for messages; `tool` names it.
std::string describe(const BoundedOutput& out, const std::string& tool, std::chrono::milliseconds timeout);

}  // namespace dtl::node
