// The asking side of a job's socket (watch/stacks_socket.h), for `dtlaunch stacks` and `dtlaunch
// top`: which running job of this user on this machine, and what it answers to an ask.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "base/error.h"
#include "watch/stacks_socket.h"

namespace dtl::watch {

/// The job that `pid` names, or the only one running here: exit code 1 when there is none, 2 when
/// several run and none was named.
Result<LiveJob> find_job(const std::optional<pid_t>& pid);

/// What `job` answers to `ask` (a word: "stacks", "ranks"): exit code 1 when it cannot be reached
/// (it ended) or says nothing within `timeout`.
Result<std::string> ask_job(const LiveJob& job, const std::string& ask, std::chrono::milliseconds timeout);

/// `dtlaunch stacks [PID]`: asks the job for its stacks and prints the answer on stdout. Returns
/// the exit code: 0, 1 when no job of this user runs here (or it did not answer), 2 when several do
/// and none was named.
int print_stacks(const std::optional<pid_t>& pid);

}  // namespace dtl::watch
