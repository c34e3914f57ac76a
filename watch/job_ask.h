// The asking side of a job's socket (watch/stacks_socket.h) for `dtlaunch top`: which running job of
// this user on this machine, and what it answers to an ask.
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

/// What `job` answers to `ask` (a word: "ranks"): exit code 1 when it cannot be reached (it ended)
/// or says nothing within `timeout`.
Result<std::string> ask_job(const LiveJob& job, const std::string& ask, std::chrono::milliseconds timeout);

}  // namespace dtl::watch
