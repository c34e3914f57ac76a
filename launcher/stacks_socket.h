// Where `dtlaunch stacks` finds the running jobs of its user on this machine: each supervisor (or
// node agent) listens on a Unix socket `<pid>.sock` in a folder only that user may enter
// ($XDG_RUNTIME_DIR/dtlaunch, else /tmp/dtlaunch-<uid>), and answers a connection from the same
// user (or root) with every rank's stack now. The file goes with the job.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtl::launcher {

/// The folder, made (mode 0700) when `create`; "" when it cannot be made or is not this user's alone.
std::string stacks_dir(bool create);

struct LiveJob {
  pid_t pid = 0;
  std::string socket;
};
/// The jobs whose socket is in the folder and whose dtlaunch still runs; stale sockets are removed.
std::vector<LiveJob> live_jobs();

/// `dtlaunch stacks [PID]`: connects to the job's socket and prints what it answers on stdout.
/// Returns the exit code: 0, 1 when no job of this user runs here (or it did not answer), 2 when
/// several do and none was named.
int print_stacks(const std::optional<pid_t>& pid);

}  // namespace dtl::launcher
