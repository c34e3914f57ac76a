#include "launcher/supervisor_policy.h"

#include <spdlog/spdlog.h>

#include "launcher/failure.h"

namespace dtl::launcher {

SupervisorPolicy::SupervisorPolicy(Group& group, GroupEnv env, std::string title, std::string host)
    : group_(group), env_(std::move(env)), title_(std::move(title)), host_(std::move(host)) {}

void SupervisorPolicy::start() {
  env_.restart_count = 0;
  group_.start(env_);
}

void SupervisorPolicy::on_signal(int sig) {
  if (!group_.active()) return;
  if (stop_signal_ == 0) {
    spdlog::warn("received {}, stopping the workers", signal_name(sig));
    stop_signal_ = sig;
    group_.stop(sig);
  } else {
    spdlog::warn("received {} while stopping: killing the workers now", signal_name(sig));
    stop_signal_ = sig;
    group_.kill();
  }
}

std::optional<SupervisorPolicy::Ending> SupervisorPolicy::on_finished(const Group::Result& result) {
  const auto& failures = result.failures;
  if (!failures.empty() && stop_signal_ == 0 && env_.restart_count < env_.max_restarts) {
    ++env_.restart_count;
    spdlog::warn("restarting the workers ({} of {} restarts) after rank {} failed", env_.restart_count,
                 env_.max_restarts, root_cause(failures).rank);
    group_.start(env_);
    return std::nullopt;
  }
  Ending end;
  if (!failures.empty()) {
    end.summary = "\n" + format_summary(title_, failures, host_) + "\n";
    end.exit_code = exit_code_for(failures);
  }
  if (result.start_failed) end.exit_code = 1;
  if (stop_signal_ != 0) end.exit_code = 128 + stop_signal_;
  return end;
}

}  // namespace dtl::launcher
