// What /proc says a worker's process is, whatever started it: Python or native code, with CUDA's
// driver or not, and which process under a wrapper does the rank's work. The stack readers go by
// this, not by how the program was named on the command line.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace dtl::node {

struct ProcessKind {
  bool python = false;  ///< a Python interpreter: its executable is one, or it maps libpython
  bool cuda = false;    ///< CUDA's driver is loaded: its waits for the GPU show only in native frames
};

/// The kind from /proc/PID/maps' text and the executable's path.
ProcessKind process_kind_of(std::string_view maps, const std::string& exe);
/// The kind of a live process; all false when it is gone.
ProcessKind process_kind(pid_t pid);

/// Its children now (every thread's), from /proc/PID/task/TID/children.
std::vector<pid_t> children_of(pid_t pid);

struct RankProcess {
  pid_t pid = 0;  ///< the process whose stack says what the rank does
  ProcessKind kind;
};
/// The process doing a rank's work: the rank's own process when it is Python; else the first Python
/// process below it (a wrapper script that runs Python without exec); else, for native code, the
/// rank's process, or the one a wrapper (a shell, env, numactl...) with a single child runs.
RankProcess rank_process(pid_t rank_pid);

}  // namespace dtl::node
