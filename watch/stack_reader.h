// Reading a live rank's stacks with the tools made for it: py-spy for Python (with native frames
// for a CUDA rank it cannot place), eu-stack for native code, and, where ptrace is not allowed,
// Python's own faulthandler, registered by a sitecustomize.py dtlaunch puts first on the workers'
// PYTHONPATH.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace dtl::watch {

/// One rank's stacks, or why there are none.
struct Stacks {
  std::vector<std::string> stack, native;
  std::string error;
  std::string by;  ///< "faulthandler" where that read it
};

/// The rank's stacks by `reader` (py-spy for `python`, else eu-stack), or, with `fallback_file`,
/// from its faulthandler: the signal, then what it appended to the file. Blocks for as long as the
/// reader takes (up to 10 s).
Stacks read_stacks_of(const std::string& reader, bool python, pid_t pid, const std::string& fallback_file);

/// py-spy for Python workers (DTLAUNCH_PY_SPY, else PATH, else beside the workers' interpreter
/// `exec_path`, as in a venv), eu-stack for others; "" when it is not there.
std::string find_stack_reader(bool python_workers, const std::string& exec_path);

/// Why a stack reader, a child of dtlaunch as py-spy is, may not read a worker, another child with
/// dtlaunch named its ptracer; "" when it may (or when it cannot be told).
std::string ptrace_denied();

/// Where ptrace is not allowed, the workers' Python registers faulthandler on this signal (a
/// real-time one: SIGUSR1 and SIGUSR2 belong to Slurm's --signal and the training script).
int stacks_signal();

/// The sitecustomize.py put first on the workers' PYTHONPATH where ptrace is not allowed:
/// faulthandler dumps every thread into DTLAUNCH_STACKS_FILE on DTLAUNCH_STACKS_SIGNAL, then the
/// next sitecustomize on the path runs as if this one were not there.
std::string_view site_customize();

}  // namespace dtl::watch
