// Reading a live rank's stacks with the tools made for it, chosen by what the rank's process is
// (node/process.h), not by how it was started: py-spy for Python (with its native frames where the
// Python ones place the rank nowhere), eu-stack for native code, and, where py-spy is missing or
// ptrace is not allowed, Python's own faulthandler, registered by a sitecustomize.py that dtlaunch
// puts first on the workers' PYTHONPATH. Every reader is bounded (node/bounded_run.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace dtl::watch {

/// What one reader may print: a stack of 41 threads of 900 frames is about 5 MiB of py-spy's JSON.
constexpr size_t kReaderOutputCap = 16 << 20;

/// One rank's stacks, or why there are none.
struct Stacks {
  std::vector<std::string> stack, native;
  std::string error;
  std::string by;      ///< the tool that read it, or would have: "py-spy", "eu-stack", "faulthandler"
  pid_t read_pid = 0;  ///< the process read where it is not the rank's own (a wrapper's Python child)
};

/// How this node reads stacks, found once at start.
struct StackTools {
  std::string py_spy;     ///< DTLAUNCH_PY_SPY, PATH, beside the workers' interpreter, beside dtlaunch; "" if none
  std::string eu_stack;   ///< on PATH, or ""
  std::string no_ptrace;  ///< why a reader may not ptrace the workers here; "" when it may
  bool hook = false;      ///< the workers' Python gets the faulthandler hook, which then reads their stacks
};
/// py-spy and eu-stack as found from here; `exec_path`: the workers' program (a venv's python).
StackTools find_stack_tools(const std::string& exec_path);

/// The bounds of one reading.
struct ReadLimits {
  std::chrono::milliseconds timeout{10000};  ///< each reader's
  int cancel_fd = -1;                        ///< readable: stop reading now
  int cgroup_fd = -1;                        ///< the job's cgroup, where readers run too
  int cgroup_procs_fd = -1;
};

/// The stacks of the rank whose process is `rank_pid`; `hook_file`: its DTLAUNCH_STACKS_FILE.
/// Blocks for as long as the readers take, within `limits`.
Stacks read_rank(const StackTools& tools, pid_t rank_pid, const std::string& hook_file, const ReadLimits& limits);

/// Why a stack reader, a child of dtlaunch as py-spy is, may not read a worker, another child with
/// dtlaunch named its ptracer; "" when it may (or when it cannot be told).
std::string ptrace_denied();

/// The signal the workers' faulthandler hook takes (a real-time one: SIGUSR1 and SIGUSR2 belong to
/// Slurm's --signal and the training script).
int stacks_signal();

/// The sitecustomize.py put first on the workers' PYTHONPATH where the hook reads stacks: it
/// registers faulthandler to dump every thread into DTLAUNCH_STACKS_FILE on DTLAUNCH_STACKS_SIGNAL,
/// says so in that file with its pid (only such a process is signalled), then runs `more` (the
/// flight recorder's hook), and last the next sitecustomize on the path as if this one were not
/// there: an error of the user's one is reported by Python's site as it would be, after dtlaunch's
/// hooks took their variables.
std::string site_customize(std::string_view more);

}  // namespace dtl::watch
