// What the policies (the supervisor's and the elastic agent's) need of one node's workers, so they
// are tested with a fake: start them, stop them by a sequence of signals, kill them, hear back.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "base/failure.h"
#include "launcher/worker_env.h"

namespace dtl::launcher {

/// How long after SIGKILL a worker, or a process it left, may take to go. One still there is in
/// uninterruptible sleep (D), which no signal ends: dtlaunch names it and ends without it.
constexpr std::chrono::seconds kReapLimit{10};

/// One step of a stop: send `signal`, then give the workers `wait` before the next step.
struct StopStep {
  int signal;
  std::chrono::milliseconds wait;
};

/// The stop sequence as reproc keeps it: `signal` (SIGTERM or the one dtlaunch received), the grace
/// of --shutdown_timeout, then SIGKILL.
std::vector<StopStep> stop_sequence(int signal, double grace_s);

class Group {
 public:
  struct Result {
    std::vector<Failure> failures;  ///< workers that failed on their own; empty: success or stopped
    bool start_failed = false;      ///< a worker could not be started (fork, pipe, files)
    /// Still alive kReapLimit after SIGKILL (uninterruptible sleep, D): given up on and reported; the
    /// job cannot go on with them holding their GPUs, files and ports.
    std::vector<pid_t> unreaped;
  };
  struct Callbacks {
    /// The first failures, as soon as they are seen; the group is already stopping the others.
    std::function<void(const std::vector<Failure>&)> on_failure;
    /// Every worker and everything it left behind is gone, and its output drained.
    std::function<void(const Result&)> on_finished;
  };

  virtual ~Group() = default;
  /// Starts the workers with this attempt's environment (env.restart_count names the attempt).
  virtual void start(const GroupEnv& env) = 0;
  /// Runs the stop sequence for `signal` (stop_sequence); a later call starts it over.
  virtual void stop(int signal) = 0;
  /// SIGKILL to every worker now.
  virtual void kill() = 0;
  /// Started and not yet finished.
  virtual bool active() const = 0;
};

}  // namespace dtl::launcher
