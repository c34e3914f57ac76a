#include "launcher/supervisor_state.h"

#include "base/posix.h"
#include "launcher/failure_summary.h"

namespace dtl::launcher {

SupervisorState::SupervisorState(Group& group, GroupEnv env, std::string title, std::string host)
    : group_(group), env_(std::move(env)), title_(std::move(title)), host_(std::move(host)) {}

void SupervisorState::start() {
  env_.restart_count = 0;
  group_.start(env_);
}

std::vector<std::string> SupervisorState::on_signal(int sig) {
  if (!group_.active()) return {};
  const bool first = stop_signal_ == 0;
  stop_signal_ = sig;
  if (first) {
    group_.stop(sig);
    return {"received " + posix::signal_name(sig) + ", stopping the workers"};
  }
  group_.kill();
  return {"received " + posix::signal_name(sig) + " while stopping: killing the workers now"};
}

SupervisorState::Step SupervisorState::on_finished(const Group::Result& result) {
  // A restart whose workers could not start (out of descriptors, say) ends the run with the
  // failure that called for it: its summary, its root cause's code.
  const bool restart_failed = result.start_failed && result.failures.empty() && !restarted_after_.empty();
  const auto& failures = restart_failed ? restarted_after_ : result.failures;
  const bool restart_due =
      !failures.empty() && !result.start_failed && stop_signal_ == 0 && env_.restart_count < env_.max_restarts;
  if (restart_due && result.unreaped.empty()) {
    restarted_after_ = failures;
    ++env_.restart_count;
    group_.start(env_);
    return {{"restarting the workers (" + std::to_string(env_.restart_count) + " of " +
             std::to_string(env_.max_restarts) + " restarts) after rank " + std::to_string(root_cause(failures).rank) +
             " failed"},
            std::nullopt};
  }
  Step step;
  if (restart_failed) {
    step.warnings.push_back("restart " + std::to_string(env_.restart_count) +
                            " could not start its workers: the run ends with the failure before it");
  }
  if (restart_due) {
    step.warnings.push_back("not restarting: " + std::to_string(result.unreaped.size()) +
                            " process(es) of the last attempt could not be reaped");
  }
  Ending end;
  if (!failures.empty()) {
    end.summary = "\n" + format_summary(title_, failures, host_) + "\n";
    end.exit_code = exit_code_for(failures);
  }
  if (result.start_failed && !restart_failed) end.exit_code = 1;
  if (!result.unreaped.empty() && end.exit_code == 0) end.exit_code = 1;
  if (stop_signal_ != 0) end.exit_code = 128 + stop_signal_;
  step.ending = end;
  return step;
}

}  // namespace dtl::launcher
