#include "agent/agent_state.h"

#include <signal.h>

#include <spdlog/fmt/fmt.h>

#include "base/posix.h"
#include "launcher/failure_summary.h"

namespace dtl::agent {
using namespace action;
namespace rdzv = dtl::rendezvous;

namespace {

/// The environment of a round's workers: the plan's, with the ranks and master the round assigned.
launcher::GroupEnv round_env(launcher::GroupEnv env, const rdzv::Round& r, const AgentConfig& config) {
  env.group_rank = r.group_rank;
  env.group_world_size = r.group_world_size;
  env.base_rank = r.base_rank;
  env.world_size = r.world_size;
  env.master_addr = r.master_addr;
  env.master_port = r.master_port;
  if (env.agent_store) {
    env.master_addr = config.store_addr;
    env.master_port = config.store_port;
  }
  env.restart_count = r.restart_count;
  return env;
}

}  // namespace

AgentState::AgentState(AgentConfig config) : config_(std::move(config)) {}

/// A group that could not start, as a failure of this node's first rank.
Failure AgentState::start_failure(int64_t now_ns) const {
  Failure f;
  f.host = config_.host;
  f.rank = round_ ? round_->base_rank : -1;
  f.local_rank = -1;
  f.message = "dtlaunch could not start the workers";
  f.observed_ns = now_ns;
  return f;
}

bool AgentState::group_runs() const {
  return phase_ == Phase::running || phase_ == Phase::stopping_for_round || phase_ == Phase::stopping_to_leave;
}

AgentState::Actions AgentState::on_round(const rdzv::Round& r) {
  if (phase_ == Phase::stopping_to_leave || phase_ == Phase::done) return {};
  // a node that finished runs again when another node's failure restarts the group
  Actions a{CancelBarrier{}};
  round_ = r;
  phase_ = Phase::running;
  launcher::GroupEnv env = round_env(config_.group, r, config_);
  a.push_back(
      Log{Level::info, fmt::format("round {}: node {} of {}, ranks {}..{} of {}, master {}:{}, restart {}", r.round,
                                   r.group_rank, r.group_world_size, r.base_rank, r.base_rank + config_.nproc - 1,
                                   r.world_size, env.master_addr, env.master_port, r.restart_count)});
  a.push_back(StartGroup{std::move(env)});
  return a;
}

AgentState::Actions AgentState::on_workers_failed(const std::vector<Failure>& failures) {
  if (phase_ != Phase::running) return {};
  phase_ = Phase::stopping_for_round;  // the group stops the others itself
  rdzv::Failed msg{failures};
  for (auto& f : msg.failures) f.host = config_.host;
  return {Send{msg}};
}

AgentState::Actions AgentState::on_group_finished(const launcher::Group::Result& result, int64_t now_ns) {
  Actions a;
  if (phase_ == Phase::done) return a;
  if (exit_ || error_ || signal_) {
    leave(a);
    return a;
  }
  if (!result.unreaped.empty()) {
    // Its processes hold this node's GPUs and ports: no new round can start here. The others see
    // the node leave (and go on without it where the job is elastic).
    error_ = std::to_string(result.unreaped.size()) +
             " process(es) of this node's workers could not be reaped: this node leaves the job";
    error_code_ = 1;
    leave(a);
    return a;
  }
  if (result.start_failed) a.push_back(Send{rdzv::Failed{{start_failure(now_ns)}}});
  if (phase_ == Phase::running && result.failures.empty() && !result.start_failed) {
    phase_ = Phase::finished;
    a.push_back(Send{rdzv::Done{}});
    a.push_back(ArmBarrier{config_.exit_barrier_timeout});
  } else {
    phase_ = Phase::waiting;
    a.push_back(Send{rdzv::Stopped{}});
  }
  return a;
}

AgentState::Actions AgentState::on_stop(const rdzv::Stop& stop) {
  if (!group_runs()) return {};  // this round's Stopped or Done went out already
  if (phase_ == Phase::running) phase_ = Phase::stopping_for_round;
  return {Log{Level::warn, "stopping the workers: " + stop.reason}, StopGroup{SIGTERM}};
}

AgentState::Actions AgentState::on_exit(const rdzv::Exit& exit) {
  Actions a;
  if (phase_ == Phase::done) return a;
  exit_ = exit;
  a.push_back(CancelBarrier{});  // the exit barrier, if this node was waiting in it
  stop_or_leave(SIGTERM, a);
  return a;
}

AgentState::Actions AgentState::on_error(const std::string& why, bool refused) {
  Actions a;
  if (phase_ == Phase::done) return a;
  error_ = "rendezvous: " + why;
  error_code_ = refused ? 2 : 1;
  stop_or_leave(SIGTERM, a);
  return a;
}

AgentState::Actions AgentState::on_signal(int sig) {
  Actions a;
  if (exit_ && !exit_->failures.empty() && signal_ == 0) {
    // The job had failed, with a root cause, before the signal (srun's --kill-on-bad-exit after another
    // node left with the job's code, say): the signal hurries the stop but keeps the root cause's code.
    // An Exit without failures (another node left on its own signal) is no root cause to keep.
    if (group_runs()) {
      a.push_back(Log{Level::warn, "received " + posix::signal_name(sig) +
                                       " while leaving the failed job: killing the workers now"});
      a.push_back(KillGroup{});
    }
    return a;
  }
  if (signal_ != 0) {
    a.push_back(Log{Level::warn, "received " + posix::signal_name(sig) + " while stopping: killing the workers now"});
    if (group_runs()) a.push_back(KillGroup{});
    return a;
  }
  a.push_back(Log{Level::warn, "received " + posix::signal_name(sig) + ", stopping the workers and leaving the job"});
  signal_ = sig;
  a.push_back(CloseClient{"it received " + posix::signal_name(sig)});
  stop_or_leave(sig, a);
  return a;
}

AgentState::Actions AgentState::on_barrier_timeout() {
  Actions a;
  if (phase_ != Phase::finished) return a;
  a.push_back(Log{Level::warn, fmt::format("the other nodes did not finish within {}s of this one; leaving",
                                           config_.exit_barrier_timeout.count())});
  leave(a);
  return a;
}

/// Stops the workers if any run (leaving once they are gone), else leaves now.
void AgentState::stop_or_leave(int sig, Actions& a) {
  if (!group_runs()) return leave(a);
  phase_ = Phase::stopping_to_leave;
  a.push_back(StopGroup{sig});
}

void AgentState::leave(Actions& a) {
  if (phase_ == Phase::done) return;
  phase_ = Phase::done;
  int code = 0;
  if (exit_) {
    code = exit_->code;
    if (code != 0) {
      const bool reporter = !round_ || round_->group_rank == 0;  // one summary for the job
      if (reporter && !exit_->failures.empty()) a.push_back(Summary{exit_->failures});
      a.push_back(Log{Level::error, "the job failed: " + exit_->reason});
    }
  }
  if (error_) {
    a.push_back(Log{Level::error, *error_});
    code = error_code_;
  }
  if (signal_) code = 128 + signal_;
  exit_code_ = code;
  a.push_back(Leave{code, signal_ ? "it received " + posix::signal_name(signal_) : ""});
}

}  // namespace dtl::agent
