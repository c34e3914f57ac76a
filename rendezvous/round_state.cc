#include "rendezvous/round_state.h"

#include <algorithm>
#include <tuple>

namespace dtl::rendezvous {
namespace {

std::string nodes_text(int min, int max) {
  return min == max ? std::to_string(min) : std::to_string(min) + ":" + std::to_string(max);
}

}  // namespace

std::vector<std::pair<NodeId, Round>> assign_ranks(const std::map<NodeId, Member>& nodes, bool static_backend,
                                                   uint32_t round, int32_t restart_count) {
  std::vector<std::pair<NodeId, const Member*>> order;
  int32_t world = 0;
  for (const auto& [id, m] : nodes) {
    order.emplace_back(id, &m);
    world += m.join.nproc;
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const Join& x = a.second->join;
    const Join& y = b.second->join;
    if (static_backend) return x.node_rank < y.node_rank;
    return std::make_tuple(a.second->address(), x.host, x.agent_id) <
           std::make_tuple(b.second->address(), y.host, y.agent_id);
  });
  std::vector<std::pair<NodeId, Round>> out;
  if (order.empty()) return out;
  const Member& first = *order.front().second;
  int32_t base = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    Round r;
    r.round = round;
    r.group_rank = static_cast<int32_t>(i);
    r.group_world_size = static_cast<int32_t>(order.size());
    r.base_rank = base;
    r.world_size = world;
    r.master_addr = first.address();
    r.master_port = first.join.worker_port;
    r.restart_count = restart_count;
    out.emplace_back(order[i].first, r);
    base += order[i].second->join.nproc;
  }
  return out;
}

std::optional<std::string> check_join(const RoundConfig& config, const std::map<NodeId, Member>& members,
                                      const std::map<int32_t, NodeId>& ranks, const Join& join) {
  const SettingNames& n = config.names;
  const std::string job_nodes = n.nnodes + "=" + nodes_text(config.min_nodes, config.max_nodes);
  if (join.min_nodes != config.min_nodes || join.max_nodes != config.max_nodes) {
    return n.nnodes + "=" + nodes_text(join.min_nodes, join.max_nodes) + " does not match the job's " + job_nodes;
  }
  if (join.max_restarts != config.max_restarts) {
    return n.max_restarts + "=" + std::to_string(join.max_restarts) + " does not match the job's " + n.max_restarts +
           "=" + std::to_string(config.max_restarts);
  }
  const std::string rank = n.node_rank + "=" + std::to_string(join.node_rank);
  if (config.static_backend) {
    if (join.node_rank < 0) return "the job uses the static rendezvous: give each node its " + n.node_rank;
    if (join.node_rank >= config.max_nodes) {
      return rank + " is out of range for " + job_nodes + " (0.." + std::to_string(config.max_nodes - 1) + ")";
    }
    if (auto taken = ranks.find(join.node_rank); taken != ranks.end()) {
      const Member& m = members.at(taken->second);
      return rank + " is already taken by " + m.join.host + " (" + m.address() + ")";
    }
  } else if (join.node_rank >= 0) {
    return "this node uses the static rendezvous (" + n.node_rank + "), the job the c10d one (" + n.backend + "=c10d)";
  }
  if (static_cast<int>(members.size()) >= config.max_nodes) {
    return "the job already has its " + std::to_string(config.max_nodes) + " nodes (" + job_nodes + ")";
  }
  return std::nullopt;
}

RoundState::RoundState(RoundConfig config, Clock::time_point now) : config_(config), gathering_since_(now) {}

std::string RoundState::describe(NodeId id) const {
  auto it = members_.find(id);
  if (it == members_.end()) return "node #" + std::to_string(id);
  return it->second.join.host + " (" + it->second.address() + ")";
}

RoundState::Actions RoundState::on_join(NodeId id, Member member, Clock::time_point now) {
  Actions a;
  std::optional<std::string> why;
  if (phase_ == Phase::finished) why = "the job is over";
  if (!why) why = check_join(config_, members_, node_ranks_, member.join);
  if (why) {
    a.log.push_back("refused " + member.join.host + " (" + member.address() + "): " + *why);
    a.send.emplace_back(id, Refused{*why});
    a.drop.push_back(id);
    return a;
  }
  if (config_.static_backend) node_ranks_[member.join.node_rank] = id;
  members_[id] = std::move(member);
  a.log.push_back(describe(id) + " joined (" + std::to_string(members_.size()) + " of " +
                  nodes_text(config_.min_nodes, config_.max_nodes) + " nodes)");
  if (phase_ == Phase::gathering) {
    maybe_complete(now, a);
  } else if (phase_ == Phase::running) {
    membership_changed_ = true;
    stop_round(describe(id) + " joined: forming a larger group", a);
  }
  return a;
}

void RoundState::maybe_complete(Clock::time_point now, Actions& a) {
  const int n = static_cast<int>(members_.size());
  if (n >= config_.max_nodes) {
    complete(a);
    return;
  }
  if (!config_.static_backend && n >= config_.min_nodes) {
    if (!last_call_) last_call_ = now + config_.last_call_timeout;
    if (now >= *last_call_) {
      complete(a);
      return;
    }
    a.wake_at = *last_call_;
  } else {
    last_call_.reset();
  }
  auto deadline = gathering_since_ + config_.join_timeout;
  if (!a.wake_at || deadline < *a.wake_at) a.wake_at = deadline;
}

void RoundState::complete(Actions& a) {
  ++round_;
  assigned_.clear();
  for (auto& [id, round] : assign_ranks(members_, config_.static_backend, round_, restart_count_)) {
    assigned_[id] = round;
    a.send.emplace_back(id, round);
  }
  in_round_.clear();
  for (const auto& [id, m] : members_) in_round_.insert(id);
  settled_.clear();
  done_.clear();
  failures_.clear();
  membership_changed_ = false;
  last_call_.reset();
  phase_ = Phase::running;
  const Round& r = assigned_.begin()->second;
  a.log.push_back("round " + std::to_string(round_) + ": " + std::to_string(r.group_world_size) + " nodes, world size " +
                  std::to_string(r.world_size) +
                  (config_.agent_store ? ", store on the rendezvous port"
                                       : ", master " + r.master_addr + ":" + std::to_string(r.master_port)) +
                  ", restart " + std::to_string(restart_count_));
}

void RoundState::stop_round(const std::string& reason, Actions& a, std::optional<NodeId> except) {
  phase_ = Phase::stopping;
  a.log.push_back("stopping the round: " + reason);
  for (NodeId id : in_round_) {
    if (!settled_.count(id) && id != except) a.send.emplace_back(id, Stop{reason});
  }
}

RoundState::Actions RoundState::on_failed(NodeId id, std::vector<FailureReport> failures, Clock::time_point now) {
  Actions a;
  if ((phase_ != Phase::running && phase_ != Phase::stopping) || !in_round_.count(id)) return a;
  const FailureReport first = failures.empty() ? FailureReport{} : failures.front();
  failures_.insert(failures_.end(), failures.begin(), failures.end());
  if (phase_ == Phase::running) {
    stop_round("rank " + std::to_string(first.rank) + " on " + describe(id) + " failed", a, id);
  }
  return a;
}

RoundState::Actions RoundState::on_stopped(NodeId id, Clock::time_point now) {
  Actions a;
  if (phase_ == Phase::stopping && in_round_.count(id)) {
    settled_.insert(id);
    maybe_decide(now, a);
  }
  return a;
}

RoundState::Actions RoundState::on_done(NodeId id, Clock::time_point now) {
  Actions a;
  if (!in_round_.count(id)) return a;
  settled_.insert(id);
  if (phase_ == Phase::running) {
    done_.insert(id);
    if (done_ == in_round_) finish(0, "every node finished", a);
  } else if (phase_ == Phase::stopping) {
    maybe_decide(now, a);
  }
  return a;
}

void RoundState::maybe_decide(Clock::time_point now, Actions& a) {
  if (phase_ != Phase::stopping) return;
  for (NodeId id : in_round_) {
    if (!settled_.count(id)) return;
  }
  const bool restart = !failures_.empty() && restart_count_ < config_.max_restarts;
  if (!membership_changed_ && !restart) {
    finish(exit_code_for(failures_), failures_.empty() ? "the round stopped" : "workers failed and no restarts are left",
           a);
    return;
  }
  if (membership_changed_) {
    a.log.push_back("re-forming the group with " + std::to_string(members_.size()) + " nodes (no restart spent)");
  } else {
    ++restart_count_;
    a.log.push_back("restarting the workers (" + std::to_string(restart_count_) + " of " +
                    std::to_string(config_.max_restarts) + " restarts)");
  }
  phase_ = Phase::gathering;
  gathering_since_ = now;
  in_round_.clear();
  maybe_complete(now, a);
}

RoundState::Actions RoundState::on_lost(NodeId id, const std::string& why, Clock::time_point now) {
  return remove(id, false, why, now);
}

RoundState::Actions RoundState::on_left(NodeId id, const std::string& why, Clock::time_point now) {
  auto a = remove(id, true, why, now);
  a.drop.push_back(id);  // by its own word: the hang-up that follows is no loss
  return a;
}

RoundState::Actions RoundState::remove(NodeId id, bool left, const std::string& why, Clock::time_point now) {
  Actions a;
  auto it = members_.find(id);
  if (it == members_.end() || phase_ == Phase::finished) {
    if (it != members_.end()) {
      node_ranks_.erase(it->second.join.node_rank);
      members_.erase(it);
    }
    return a;
  }
  const std::string who = describe(id);
  const std::string gone = who + (left ? " left: " : " lost: ") + why;
  a.log.push_back(gone);
  const bool was_done = done_.count(id) > 0;
  const bool in_round = in_round_.erase(id) > 0;
  auto round = assigned_.find(id);
  settled_.erase(id);
  done_.erase(id);
  node_ranks_.erase(it->second.join.node_rank);
  members_.erase(it);
  if (phase_ == Phase::gathering) {
    maybe_complete(now, a);
    return a;
  }
  if (!in_round) return a;  // it was waiting for the next round
  if (was_done) {
    if (phase_ == Phase::running && done_ == in_round_) finish(0, "every node finished", a);
    return a;
  }
  if (config_.static_backend || static_cast<int>(members_.size()) < config_.min_nodes) {
    if (left) {
      // No failure: the job ends for the node's reason, which every node prints. Failures an earlier
      // restart answered are not why it ends, and a node signalled next must not take them for a root cause.
      failures_.clear();
      finish(1, gone, a);
      return a;
    }
    FailureReport lost;
    lost.host = who;
    lost.rank = round != assigned_.end() ? round->second.base_rank : -1;
    lost.local_rank = -1;
    lost.exitcode = 1;
    lost.observed_ns = 0;
    lost.message = "the node was lost (" + why + ")";
    lost.error_file = "<N/A>";
    failures_.push_back(lost);
    finish(1, who + " was lost and the job cannot go on without it", a);
    return a;
  }
  membership_changed_ = true;
  if (phase_ == Phase::running) {
    stop_round(who + (left ? " left" : " lost") + ": forming a smaller group", a);
  } else {
    maybe_decide(now, a);
  }
  return a;
}

RoundState::Actions RoundState::on_tick(Clock::time_point now) {
  Actions a;
  if (phase_ != Phase::gathering) return a;
  if (now >= gathering_since_ + config_.join_timeout) {
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(config_.join_timeout).count();
    finish(1,
           "the rendezvous timed out after " + std::to_string(secs) + "s with " + std::to_string(members_.size()) +
               " of " + nodes_text(config_.min_nodes, config_.max_nodes) + " nodes",
           a);
    return a;
  }
  maybe_complete(now, a);
  return a;
}

RoundState::Actions RoundState::on_shutdown(const std::string& reason) {
  Actions a;
  failures_.clear();  // (as for a node that left: earlier restarts' failures are not why the job ends)
  if (phase_ != Phase::finished) finish(1, reason, a);
  return a;
}

void RoundState::finish(int32_t code, const std::string& reason, Actions& a) {
  phase_ = Phase::finished;
  exit_code_ = code;
  a.finished = true;
  a.log.push_back("job over (exit code " + std::to_string(code) + "): " + reason);
  for (const auto& [id, m] : members_) a.send.emplace_back(id, Exit{code, reason, failures_});
}

}  // namespace dtl::rendezvous
