// The rendezvous decisions as a pure state machine: events (a node joined, was lost, reported a
// failure, stopped its workers, finished) at a given time go in; messages to send, connections to
// drop and when to be woken come out. No sockets, no clocks: the server feeds it, tests drive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/protocol.h"

namespace dtl::rendezvous {

using Clock = std::chrono::steady_clock;
using NodeId = uint64_t;  ///< the server's name for one connection

/// What the agents call the settings a join carries, for the refusals that name them: the launcher
/// gives its flags ("--node_rank"); rendezvous/ names no flag itself.
struct SettingNames {
  std::string nnodes = "nnodes";
  std::string node_rank = "node_rank";
  std::string max_restarts = "max_restarts";
  std::string backend = "rdzv_backend";
};

struct RoundConfig {
  bool static_backend = true;  ///< ranks from each node's rank; otherwise assigned, elastic MIN:MAX
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  Clock::duration join_timeout = std::chrono::seconds(600);
  Clock::duration last_call_timeout = std::chrono::seconds(30);
  SettingNames names;
  /// The hosting agent serves the workers' store on the rendezvous port: the round's master port
  /// (group rank 0's spare) is not what workers use, and the log does not name it.
  bool agent_store = false;
};

/// A node that joined: what it said, and the address the server saw it connect from.
struct Member {
  Join join;
  std::string peer_addr;
  std::string address() const { return join.addr.empty() ? peer_addr : join.addr; }
};

/// Group ranks for the nodes of a round: static by node_rank, dynamic by (address, host, agent id),
/// so every run with the same nodes gives the same ranks. Base ranks are the running sum of nproc.
std::vector<std::pair<NodeId, Round>> assign_ranks(const std::map<NodeId, Member>& nodes, bool static_backend,
                                                   uint32_t round, int32_t restart_count);

/// Why a joining node is refused, if it is. `ranks` holds the static node ranks already taken.
std::optional<std::string> check_join(const RoundConfig& config, const std::map<NodeId, Member>& members,
                                      const std::map<int32_t, NodeId>& ranks, const Join& join);

class RoundState {
 public:
  struct Actions {
    std::vector<std::pair<NodeId, Message>> send;  ///< in order
    std::vector<NodeId> drop;                      ///< close after sending
    std::optional<Clock::time_point> wake_at;      ///< call on_tick then
    std::vector<std::string> log;                  ///< lines for the server's log
    bool finished = false;                         ///< Exit went out to every node: the job is over
  };

  enum class Phase { gathering, running, stopping, finished };

  RoundState(RoundConfig config, Clock::time_point now);

  Actions on_join(NodeId id, Member member, Clock::time_point now);
  Actions on_lost(NodeId id, const std::string& why, Clock::time_point now);
  /// The node said it leaves (a signal stopped it): as lost, but named as leaving, and no failure of its
  /// own; its connection is dropped.
  Actions on_left(NodeId id, const std::string& why, Clock::time_point now);
  Actions on_failed(NodeId id, std::vector<FailureReport> failures, Clock::time_point now);
  Actions on_stopped(NodeId id, Clock::time_point now);
  Actions on_done(NodeId id, Clock::time_point now);
  Actions on_tick(Clock::time_point now);
  /// The server is going away (its hosting agent leaves): every node is told to leave.
  Actions on_shutdown(const std::string& reason);

  Phase phase() const { return phase_; }
  int restart_count() const { return restart_count_; }
  uint32_t round() const { return round_; }
  size_t members() const { return members_.size(); }
  /// The code every node was told to exit with (once finished).
  int32_t exit_code() const { return exit_code_; }
  /// "host (address)" of a node, for messages.
  std::string name(NodeId id) const { return describe(id); }

 private:
  void maybe_complete(Clock::time_point now, Actions& a);
  void complete(Actions& a);
  /// Stop to every node of the round but `except` (the one that reported the failure).
  void stop_round(const std::string& reason, Actions& a, std::optional<NodeId> except = std::nullopt);
  void maybe_decide(Clock::time_point now, Actions& a);
  void finish(int32_t code, const std::string& reason, Actions& a);
  /// A node gone from the job: lost (`left` false: a failure of the round) or left on its own.
  Actions remove(NodeId id, bool left, const std::string& why, Clock::time_point now);
  std::string describe(NodeId id) const;

  RoundConfig config_;
  Phase phase_ = Phase::gathering;
  std::map<NodeId, Member> members_;  ///< joined and connected, in the round or waiting for the next
  std::map<NodeId, Round> assigned_;  ///< this round's ranks, for naming a lost node
  std::map<int32_t, NodeId> node_ranks_;  ///< static backend: who holds each node rank (O(log n) joins)
  std::set<NodeId> in_round_;         ///< the nodes of the running (or stopping) round
  std::set<NodeId> settled_;          ///< in the round, and stopped or done
  std::set<NodeId> done_;
  std::vector<FailureReport> failures_;
  bool membership_changed_ = false;   ///< the stop is for a node joining or leaving: no restart spent
  int restart_count_ = 0;
  int32_t exit_code_ = 0;
  uint32_t round_ = 0;
  Clock::time_point gathering_since_;
  std::optional<Clock::time_point> last_call_;
};

}  // namespace dtl::rendezvous
