// The elastic agent's lifecycle as a pure state machine, as RoundState is the server's: events (a
// round assigned, the workers failed or finished, the server's Stop and Exit, a rendezvous error, a
// signal, the exit barrier's timeout) go in; what to do with the group, the server, the console
// and the timer comes out, in order. No sockets, processes or clocks: the agent feeds it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher/group.h"
#include "rendezvous/protocol.h"

namespace dtl::agent {

struct AgentConfig {
  launcher::GroupEnv group;  ///< every round's environment but what the round assigns
  int nproc = 1;
  std::string host;  ///< this node's name, on its failure reports
  std::chrono::seconds exit_barrier_timeout{300};
  /// With group.agent_store: where the workers' store is served (the rendezvous endpoint, which
  /// every node reaches the same way), instead of the master the round names.
  std::string store_addr;
  int store_port = 0;
};

namespace action {
enum class Level { info, warn, error };
struct Log {
  Level level;
  std::string text;
};
struct StartGroup {
  launcher::GroupEnv env;
};
struct StopGroup {  ///< the stop sequence for `signal`
  int signal;
};
struct KillGroup {};
struct Send {  ///< Failed, Stopped or Done to the server
  rendezvous::Message message;
};
struct CloseClient {  ///< tell the server this node leaves, and why, then hang up
  std::string reason;
};
struct ArmBarrier {  ///< on_barrier_timeout after `timeout`, unless cancelled
  std::chrono::seconds timeout;
};
struct CancelBarrier {};
struct Summary {  ///< torchrun's failure summary for these failures to stderr
  std::vector<Failure> failures;
};
struct Leave {  ///< the node is done with the job: end it with this exit code
  int exit_code;
  std::string why;  ///< "it received SIGTERM" when a signal ended it; else empty
};
using Action =
    std::variant<Log, StartGroup, StopGroup, KillGroup, Send, CloseClient, ArmBarrier, CancelBarrier, Summary, Leave>;
}  // namespace action

class AgentState {
 public:
  using Actions = std::vector<action::Action>;

  enum class Phase {
    waiting,             ///< for a round: none yet, or this node's Stopped went out
    running,             ///< the round's workers run
    stopping_for_round,  ///< the workers stop for the server's Stop or their own failure; the node stays
    finished,            ///< the workers succeeded and Done went out: waiting for the others (exit barrier)
    stopping_to_leave,   ///< the workers stop because this node leaves (Exit, rendezvous error, signal)
    done,                ///< left, with exit_code()
  };

  explicit AgentState(AgentConfig config);

  Actions on_round(const rendezvous::Round& round);
  Actions on_workers_failed(const std::vector<Failure>& failures);
  /// `now_ns`: the wall clock (ns since epoch) for the report of a group that could not start.
  Actions on_group_finished(const launcher::Group::Result& result, int64_t now_ns);
  Actions on_stop(const rendezvous::Stop& stop);
  Actions on_exit(const rendezvous::Exit& exit);
  /// The rendezvous failed (`refused`: the server would not take this node).
  Actions on_error(const std::string& why, bool refused);
  /// dtlaunch received `sig` (one of --signals_to_handle).
  Actions on_signal(int sig);
  Actions on_barrier_timeout();

  Phase phase() const { return phase_; }
  int exit_code() const { return exit_code_; }

 private:
  bool group_runs() const;
  Failure start_failure(int64_t now_ns) const;
  void stop_or_leave(int sig, Actions& a);
  void leave(Actions& a);

  AgentConfig config_;
  Phase phase_ = Phase::waiting;
  std::optional<rendezvous::Round> round_;
  // Why this node leaves; each may be set, and the exit code takes the last of exit, error, signal.
  std::optional<rendezvous::Exit> exit_;
  std::optional<std::string> error_;  ///< why this node leaves on its own: a rendezvous error, workers it cannot reap
  int error_code_ = 1;
  int signal_ = 0;
  int exit_code_ = 0;
};

}  // namespace dtl::agent
