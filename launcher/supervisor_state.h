// The single-node policy over a Group, apart from the event loop so tests drive it with a fake:
// restart while restarts are left, forward a signal as the stop sequence, SIGKILL on a second one,
// and say how dtlaunch ends. It logs nothing itself: its warnings come back, as AgentState's do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/group.h"

namespace dtl::launcher {

class SupervisorState {
 public:
  /// How the run ended: dtlaunch's exit code, and the failure summary for stderr (empty: none).
  struct Ending {
    int exit_code = 0;
    std::string summary;
  };
  /// What on_finished asks of the supervisor: warnings to log, one line each, and how the run
  /// ends, when it does (else a restart has begun).
  struct Step {
    std::vector<std::string> warnings;
    std::optional<Ending> ending;
  };

  /// `env` is every attempt's environment but restart_count; `title` and `host` name the program
  /// and this node in the summary.
  SupervisorState(Group& group, GroupEnv env, std::string title, std::string host);

  /// Starts the first attempt.
  void start();
  /// dtlaunch received `sig` (one of --signals_to_handle); returns the warnings to log.
  std::vector<std::string> on_signal(int sig);
  /// The group finished: restarts it, or returns how the run ends: 0, the root cause's code
  /// (base/failure.h), 1 when a worker of the first attempt could not be started or a process
  /// could not be reaped (then no restart either), 128+N after signal N. A restart that could not
  /// start ends with the summary and code of the failure that called for it.
  Step on_finished(const Group::Result& result);

 private:
  Group& group_;
  GroupEnv env_;
  std::string title_, host_;
  int stop_signal_ = 0;  ///< a signal dtlaunch received and forwarded
  std::vector<Failure> restarted_after_;  ///< the failures the running attempt is the restart for
};

}  // namespace dtl::launcher
