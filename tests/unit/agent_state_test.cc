#include <catch2/catch.hpp>
#include <signal.h>

#include "agent/agent_state.h"

using namespace dtl::launcher;
using namespace dtl::agent;
using namespace dtl::agent::action;
namespace rdzv = dtl::rendezvous;
using dtl::Failure;
using Phase = AgentState::Phase;

namespace {

AgentConfig config() {
  AgentConfig c;
  c.group.run_id = "job";
  c.group.max_restarts = 2;
  c.nproc = 2;
  c.host = "node-a";
  c.exit_barrier_timeout = std::chrono::seconds(300);
  return c;
}

rdzv::Round round(int group_rank, uint32_t number = 1, int restart_count = 0) {
  rdzv::Round r;
  r.round = number;
  r.group_rank = group_rank;
  r.group_world_size = 2;
  r.base_rank = 2 * group_rank;
  r.world_size = 4;
  r.master_addr = "10.0.0.1";
  r.master_port = 29500;
  r.restart_count = restart_count;
  return r;
}

Failure failure(int rank, int exitcode) {
  Failure f;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.exitcode = exitcode;
  f.error_file = "<N/A>";
  return f;
}

const Group::Result success{};
Group::Result failed(std::vector<Failure> failures) { return {std::move(failures), false, {}}; }

/// The actions as short words, so a test reads the whole sequence in order.
std::vector<std::string> words(const AgentState::Actions& actions) {
  std::vector<std::string> out;
  for (const auto& action : actions) {
    std::visit(
        [&](const auto& a) {
          using T = std::decay_t<decltype(a)>;
          if constexpr (std::is_same_v<T, Log>) {
            out.push_back(std::string(a.level == Level::info ? "info" : a.level == Level::warn ? "warn" : "error") +
                          ": " + a.text);
          } else if constexpr (std::is_same_v<T, StartGroup>) {
            out.push_back("start restart " + std::to_string(a.env.restart_count));
          } else if constexpr (std::is_same_v<T, StopGroup>) {
            out.push_back("stop " + std::to_string(a.signal));
          } else if constexpr (std::is_same_v<T, KillGroup>) {
            out.push_back("kill");
          } else if constexpr (std::is_same_v<T, Send>) {
            out.push_back(std::string("send ") + rdzv::message_name(a.message));
          } else if constexpr (std::is_same_v<T, CloseClient>) {
            out.push_back("hang up: " + a.reason);
          } else if constexpr (std::is_same_v<T, ArmBarrier>) {
            out.push_back("barrier " + std::to_string(a.timeout.count()) + "s");
          } else if constexpr (std::is_same_v<T, CancelBarrier>) {
            out.push_back("cancel barrier");
          } else if constexpr (std::is_same_v<T, Summary>) {
            out.push_back("summary of " + std::to_string(a.failures.size()));
          } else if constexpr (std::is_same_v<T, Leave>) {
            out.push_back("leave " + std::to_string(a.exit_code) + (a.why.empty() ? "" : " (" + a.why + ")"));
          }
        },
        action);
  }
  return out;
}

template <class T>
const T& only(const AgentState::Actions& actions) {
  const T* found = nullptr;
  for (const auto& a : actions) {
    if (auto* x = std::get_if<T>(&a)) {
      REQUIRE(found == nullptr);
      found = x;
    }
  }
  REQUIRE(found != nullptr);
  return *found;
}

/// An agent whose group runs round 1 as node `group_rank`.
AgentState running(int group_rank = 0) {
  AgentState s(config());
  s.on_round(round(group_rank));
  return s;
}

using W = std::vector<std::string>;

}  // namespace

TEST_CASE("a round starts the group with the ranks and master the round assigned") {
  AgentState s(config());
  CHECK(s.phase() == Phase::waiting);
  auto a = s.on_round(round(1, 3, 1));
  CHECK(words(a) ==
        W{"cancel barrier", "info: round 3: node 1 of 2, ranks 2..3 of 4, master 10.0.0.1:29500, restart 1",
          "start restart 1"});
  const GroupEnv& env = only<StartGroup>(a).env;
  CHECK(env.group_rank == 1);
  CHECK(env.group_world_size == 2);
  CHECK(env.base_rank == 2);
  CHECK(env.world_size == 4);
  CHECK(env.master_addr == "10.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.run_id == "job");  // the rest is the plan's
  CHECK(s.phase() == Phase::running);
}

TEST_CASE("failed workers are reported under this node's name, and Stopped follows once the group is gone") {
  auto s = running();
  auto a = s.on_workers_failed({failure(1, 3)});
  CHECK(words(a) == W{"send failed"});
  const auto& sent = std::get<rdzv::Failed>(only<Send>(a).message);
  REQUIRE(sent.failures.size() == 1);
  CHECK(sent.failures[0].host == "node-a");
  CHECK(sent.failures[0].rank == 1);
  CHECK(s.phase() == Phase::stopping_for_round);
  CHECK(words(s.on_group_finished(failed({failure(1, 3)}), 0)) == W{"send stopped"});
  CHECK(s.phase() == Phase::waiting);
}

TEST_CASE("a group that succeeds sends Done and waits in the exit barrier") {
  auto s = running();
  CHECK(words(s.on_group_finished(success, 0)) == W{"send done", "barrier 300s"});
  CHECK(s.phase() == Phase::finished);
}

TEST_CASE("a finished node is started again when another node's failure restarts the group") {
  auto s = running();
  s.on_group_finished(success, 0);
  CHECK(words(s.on_stop(rdzv::Stop{"rank 3 failed"})).empty());  // its Done went out already
  auto a = s.on_round(round(0, 2, 1));
  CHECK(words(a).front() == "cancel barrier");
  CHECK(words(a).back() == "start restart 1");
  CHECK(s.phase() == Phase::running);
  CHECK(words(s.on_barrier_timeout()).empty());  // a timer that fired as the round came
}

TEST_CASE("the server's Stop stops a running group with SIGTERM, and Stopped follows even if it succeeded") {
  auto s = running();
  CHECK(words(s.on_stop(rdzv::Stop{"node-b lost: forming a smaller group"})) ==
        W{"warn: stopping the workers: node-b lost: forming a smaller group", "stop 15"});
  CHECK(s.phase() == Phase::stopping_for_round);
  CHECK(words(s.on_group_finished(success, 0)) == W{"send stopped"});
  CHECK(s.phase() == Phase::waiting);
}

TEST_CASE("a Stop while waiting for a round does nothing") {
  AgentState s(config());
  CHECK(s.on_stop(rdzv::Stop{"why"}).empty());
  CHECK(s.phase() == Phase::waiting);
}

TEST_CASE("a group that cannot start is reported as a failure of the node's first rank, then Stopped") {
  auto s = running(1);
  auto a = s.on_group_finished(Group::Result{{}, true, {}}, 1234);
  CHECK(words(a) == W{"send failed", "send stopped"});
  const auto& f = std::get<rdzv::Failed>(std::get<Send>(a[0]).message).failures.at(0);
  CHECK(f.rank == 2);
  CHECK(f.local_rank == -1);
  CHECK(f.host == "node-a");
  CHECK(f.observed_ns == 1234);
  CHECK(f.message == "dtlaunch could not start the workers");
}

TEST_CASE("an Exit while the group runs stops it, and the node leaves with the job's code once it is gone") {
  auto s = running(1);
  rdzv::Exit exit{3, "workers failed and no restarts are left", {failure(0, 3)}};
  CHECK(words(s.on_exit(exit)) == W{"cancel barrier", "stop 15"});
  CHECK(s.phase() == Phase::stopping_to_leave);
  // node 1 does not print the summary: node 0 does, once for the job
  CHECK(words(s.on_group_finished(success, 0)) ==
        W{"error: the job failed: workers failed and no restarts are left", "leave 3"});
  CHECK(s.phase() == Phase::done);
  CHECK(s.exit_code() == 3);
}

TEST_CASE("the node of group rank 0 prints the job's failure summary when it leaves") {
  AgentState s(config());
  s.on_round(round(0));
  s.on_workers_failed({failure(0, 3)});
  s.on_group_finished(failed({failure(0, 3)}), 0);
  auto a = s.on_exit(rdzv::Exit{3, "workers failed and no restarts are left", {failure(0, 3), failure(2, 1)}});
  CHECK(words(a) == W{"cancel barrier", "summary of 2", "error: the job failed: workers failed and no restarts are left",
                      "leave 3"});
}

TEST_CASE("an Exit in the exit barrier leaves at once with code 0") {
  auto s = running();
  s.on_group_finished(success, 0);
  CHECK(words(s.on_exit(rdzv::Exit{0, "every node finished", {}})) == W{"cancel barrier", "leave 0"});
  CHECK(s.exit_code() == 0);
}

TEST_CASE("the exit barrier's timeout leaves with code 0") {
  auto s = running();
  s.on_group_finished(success, 0);
  CHECK(words(s.on_barrier_timeout()) == W{"warn: the other nodes did not finish within 300s of this one; leaving",
                                           "leave 0"});
}

TEST_CASE("a rendezvous error while waiting for a round leaves at once: 2 for a refusal, 1 otherwise") {
  AgentState refused(config());
  CHECK(words(refused.on_error("the job already has its 2 nodes (--nnodes=2)", true)) ==
        W{"error: rendezvous: the job already has its 2 nodes (--nnodes=2)", "leave 2"});
  AgentState lost(config());
  CHECK(words(lost.on_error("lost the rendezvous server: eof", false)) ==
        W{"error: rendezvous: lost the rendezvous server: eof", "leave 1"});
}

TEST_CASE("a rendezvous error while the group runs stops it first") {
  auto s = running();
  CHECK(words(s.on_error("lost the rendezvous server: eof", false)) == W{"stop 15"});
  CHECK(words(s.on_group_finished(success, 0)) == W{"error: rendezvous: lost the rendezvous server: eof", "leave 1"});
}

TEST_CASE("a signal stops the group with that signal, hangs up, and the node exits 128+N") {
  auto s = running();
  CHECK(words(s.on_signal(SIGINT)) ==
        W{"warn: received SIGINT, stopping the workers and leaving the job", "hang up: it received SIGINT", "stop 2"});
  CHECK(s.phase() == Phase::stopping_to_leave);
  CHECK(words(s.on_group_finished(success, 0)) == W{"leave 130 (it received SIGINT)"});
}

TEST_CASE("a second signal while stopping kills the group at once") {
  auto s = running();
  s.on_signal(SIGTERM);
  CHECK(words(s.on_signal(SIGTERM)) == W{"warn: received SIGTERM while stopping: killing the workers now", "kill"});
  CHECK(words(s.on_group_finished(success, 0)) == W{"leave 143 (it received SIGTERM)"});
}

TEST_CASE("a signal while waiting for a round leaves at once") {
  AgentState s(config());
  CHECK(words(s.on_signal(SIGHUP)) ==
        W{"warn: received SIGHUP, stopping the workers and leaving the job", "hang up: it received SIGHUP",
          "leave 129 (it received SIGHUP)"});
}

TEST_CASE("a signal decides the exit code over the Exit that came while stopping") {
  auto s = running();
  s.on_signal(SIGTERM);
  s.on_exit(rdzv::Exit{1, "the node hosting the rendezvous left", {}});
  CHECK(words(s.on_group_finished(success, 0)) == W{"error: the job failed: the node hosting the rendezvous left",
                                                   "leave 143 (it received SIGTERM)"});
}

TEST_CASE("a signal after the job's failure hurries the stop but keeps the root cause's code") {
  // srun --kill-on-bad-exit: another node left with the job's code 5, and srun terminates this one.
  auto s = running(1);
  s.on_exit(rdzv::Exit{5, "workers failed and no restarts are left", {failure(2, 5)}});
  CHECK(words(s.on_signal(SIGTERM)) ==
        W{"warn: received SIGTERM while leaving the failed job: killing the workers now", "kill"});
  CHECK(words(s.on_group_finished(success, 0)) ==
        W{"error: the job failed: workers failed and no restarts are left", "leave 5"});
  CHECK(s.exit_code() == 5);
  CHECK(words(s.on_signal(SIGTERM)).empty());  // gone: nothing to hurry
}

TEST_CASE("a signal after an Exit with no failure in it (another node left on its signal) gives 128+N") {
  // Two nodes signalled at once: the first's leaving reaches this one before its own signal.
  auto s = running(1);
  s.on_exit(rdzv::Exit{1, "node-a (10.0.0.1) left: it received SIGTERM", {}});
  CHECK(words(s.on_signal(SIGTERM)) ==
        W{"warn: received SIGTERM, stopping the workers and leaving the job", "hang up: it received SIGTERM", "stop 15"});
  CHECK(words(s.on_group_finished(success, 0)) ==
        W{"error: the job failed: node-a (10.0.0.1) left: it received SIGTERM", "leave 143 (it received SIGTERM)"});
}

TEST_CASE("nothing moves a node that left") {
  AgentState s(config());
  s.on_error("refused", true);
  CHECK(s.on_exit(rdzv::Exit{0, "", {}}).empty());
  CHECK(s.on_error("again", false).empty());
  CHECK(s.on_round(round(0)).empty());
  CHECK(s.on_group_finished(success, 0).empty());
  CHECK(s.on_barrier_timeout().empty());
  CHECK(s.exit_code() == 2);
  CHECK(s.phase() == Phase::done);
}

TEST_CASE("workers failing while the group stops for the server are not reported again") {
  auto s = running();
  s.on_stop(rdzv::Stop{"rank 3 failed"});
  CHECK(s.on_workers_failed({failure(0, 1)}).empty());
}

TEST_CASE("a Stop while the group stops for its own failure restarts the stop sequence and Stopped follows") {
  auto s = running();
  s.on_workers_failed({failure(0, 1)});
  CHECK(words(s.on_stop(rdzv::Stop{"rank 3 on node-b failed"})) ==
        W{"warn: stopping the workers: rank 3 on node-b failed", "stop 15"});
  CHECK(s.phase() == Phase::stopping_for_round);
  CHECK(words(s.on_group_finished(failed({failure(0, 1)}), 0)) == W{"send stopped"});
}

TEST_CASE("an Exit while the group stops for the round turns the stop into leaving") {
  auto s = running(1);
  s.on_stop(rdzv::Stop{"node-c lost: forming a smaller group"});
  CHECK(words(s.on_exit(rdzv::Exit{1, "node-c was lost and the job cannot go on without it", {}})) ==
        W{"cancel barrier", "stop 15"});
  CHECK(s.phase() == Phase::stopping_to_leave);
  CHECK(words(s.on_group_finished(success, 0)) ==
        W{"error: the job failed: node-c was lost and the job cannot go on without it", "leave 1"});
}

TEST_CASE("with the agent store the workers' master is the rendezvous endpoint, not the round's") {
  AgentConfig c = config();
  c.group.agent_store = true;
  c.store_addr = "rdzv.example";
  c.store_port = 29400;
  AgentState s(c);
  auto actions = s.on_round(round(1));
  const StartGroup* start = nullptr;
  for (const auto& a : actions) {
    if (auto* st = std::get_if<StartGroup>(&a)) start = st;
  }
  REQUIRE(start);
  CHECK(start->env.master_addr == "rdzv.example");
  CHECK(start->env.master_port == 29400);
  CHECK(start->env.agent_store);
  CHECK(words(actions)[1] == "info: round 1: node 1 of 2, ranks 2..3 of 4, master rdzv.example:29400, restart 0");
}

TEST_CASE("without the agent store the workers' master is the round's") {
  AgentState s(config());
  for (const auto& a : s.on_round(round(1))) {
    if (auto* st = std::get_if<StartGroup>(&a)) {
      CHECK(st->env.master_addr == "10.0.0.1");
      CHECK(st->env.master_port == 29500);
      CHECK_FALSE(st->env.agent_store);
    }
  }
}

TEST_CASE("workers that could not be reaped make the node leave the job with 1: no new round can start here") {
  auto s = running();
  s.on_workers_failed({failure(1, 3)});
  CHECK(words(s.on_group_finished(Group::Result{{failure(1, 3)}, false, {4321}}, 0)) ==
        W{"error: 1 process(es) of this node's workers could not be reaped: this node leaves the job", "leave 1"});
  CHECK(s.phase() == Phase::done);
}
