#include <catch2/catch.hpp>

#include "rendezvous/round_state.h"

using namespace dtl::rendezvous;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0{};

Member node(const std::string& host, int nproc, int node_rank = -1, int min = 2, int max = 2, int restarts = 0) {
  Member m;
  m.join.host = host;
  m.join.nproc = nproc;
  m.join.node_rank = node_rank;
  m.join.min_nodes = min;
  m.join.max_nodes = max;
  m.join.max_restarts = restarts;
  m.join.worker_port = 30000 + (node_rank < 0 ? 0 : node_rank);
  m.peer_addr = "10.0.0." + host.substr(host.size() - 1);
  return m;
}

template <class T>
std::vector<std::pair<NodeId, T>> sent(const RoundState::Actions& a) {
  std::vector<std::pair<NodeId, T>> out;
  for (const auto& [id, m] : a.send) {
    if (auto* x = std::get_if<T>(&m)) out.emplace_back(id, *x);
  }
  return out;
}

// Refusals name the settings as the launcher calls them (rendezvous/ names no flag itself).
const SettingNames kFlags{"--nnodes", "--node_rank", "--max_restarts", "--rdzv_backend"};

RoundConfig static_two(int restarts = 0) {
  RoundConfig c;
  c.names = kFlags;
  c.min_nodes = c.max_nodes = 2;
  c.max_restarts = restarts;
  return c;
}

RoundConfig elastic(int min, int max) {
  RoundConfig c;
  c.names = kFlags;
  c.static_backend = false;
  c.min_nodes = min;
  c.max_nodes = max;
  c.last_call_timeout = 5s;
  c.join_timeout = 60s;
  return c;
}

FailureReport failure(int rank, int code, int64_t ns) {
  FailureReport f;
  f.rank = rank;
  f.exitcode = code;
  f.observed_ns = ns;
  return f;
}

}  // namespace

TEST_CASE("heterogeneous nodes get contiguous ranks: 1+2+3 workers are ranks 0..5 with bases 0,1,3") {
  std::map<NodeId, Member> nodes{{7, node("c3", 3, 2, 3, 3)}, {8, node("a1", 1, 0, 3, 3)}, {9, node("b2", 2, 1, 3, 3)}};
  auto r = assign_ranks(nodes, true, 1, 0);
  REQUIRE(r.size() == 3);
  CHECK(r[0].first == 8);
  CHECK(r[1].first == 9);
  CHECK(r[2].first == 7);
  CHECK(r[0].second.base_rank == 0);
  CHECK(r[1].second.base_rank == 1);
  CHECK(r[2].second.base_rank == 3);
  for (auto& [id, round] : r) {
    CHECK(round.world_size == 6);
    CHECK(round.group_world_size == 3);
    CHECK(round.master_addr == "10.0.0.1");
    CHECK(round.master_port == 30000);
  }
}

TEST_CASE("dynamic ranks follow the nodes' addresses, whatever the join order") {
  std::map<NodeId, Member> a{{1, node("n2", 4)}, {2, node("n1", 4)}};
  std::map<NodeId, Member> b{{5, node("n1", 4)}, {6, node("n2", 4)}};
  auto ra = assign_ranks(a, false, 1, 0);
  auto rb = assign_ranks(b, false, 1, 0);
  CHECK(a.at(ra[0].first).join.host == "n1");
  CHECK(b.at(rb[0].first).join.host == "n1");
  CHECK(ra[1].second.base_rank == 4);
}

TEST_CASE("a static round completes when every node rank has joined") {
  RoundState s(static_two(), t0);
  auto a = s.on_join(1, node("n1", 2, 1), t0);
  CHECK(sent<Round>(a).empty());
  CHECK(a.wake_at == t0 + 600s);
  a = s.on_join(2, node("n0", 2, 0), t0 + 1s);
  auto rounds = sent<Round>(a);
  REQUIRE(rounds.size() == 2);
  CHECK(s.phase() == RoundState::Phase::running);
  CHECK(rounds[0].first == 2);
  CHECK(rounds[0].second.group_rank == 0);
  CHECK(rounds[1].second.base_rank == 2);
  CHECK(a.log.back() == "round 1: 2 nodes, world size 4, master 10.0.0.0:30000, restart 0");
}

TEST_CASE("with the agent's store, the round's log names no worker port (the workers do not use it)") {
  RoundConfig c = static_two();
  c.agent_store = true;
  RoundState s(c, t0);
  s.on_join(1, node("n1", 2, 1), t0);
  auto a = s.on_join(2, node("n0", 2, 0), t0);
  CHECK(a.log.back() == "round 1: 2 nodes, world size 4, store on the rendezvous port, restart 0");
}

TEST_CASE("duplicate, out-of-range and mismatched joins are refused to the offender") {
  RoundState s(static_two(), t0);
  s.on_join(1, node("n0", 2, 0), t0);
  auto a = s.on_join(2, node("dup", 2, 0), t0);
  REQUIRE(sent<Refused>(a).size() == 1);
  CHECK(sent<Refused>(a)[0].second.reason == "--node_rank=0 is already taken by n0 (10.0.0.0)");
  CHECK(a.drop == std::vector<NodeId>{2});
  a = s.on_join(3, node("far", 2, 5), t0);
  CHECK(sent<Refused>(a)[0].second.reason == "--node_rank=5 is out of range for --nnodes=2 (0..1)");
  a = s.on_join(4, node("n1", 2, 1, 1, 2), t0);
  CHECK(sent<Refused>(a)[0].second.reason == "--nnodes=1:2 does not match the job's --nnodes=2");
  a = s.on_join(5, node("n1", 2, 1, 2, 2, 3), t0);
  CHECK(sent<Refused>(a)[0].second.reason == "--max_restarts=3 does not match the job's --max_restarts=0");
  CHECK(s.members() == 1);
}

TEST_CASE("a dynamic round completes at MAX nodes at once") {
  RoundState s(elastic(1, 2), t0);
  s.on_join(1, node("n1", 1, -1, 1, 2), t0);
  auto a = s.on_join(2, node("n2", 1, -1, 1, 2), t0 + 1s);
  CHECK(sent<Round>(a).size() == 2);
}

TEST_CASE("a dynamic round completes at MIN nodes once the last call passes") {
  RoundState s(elastic(2, 4), t0);
  s.on_join(1, node("n1", 1, -1, 2, 4), t0);
  auto a = s.on_join(2, node("n2", 1, -1, 2, 4), t0 + 1s);
  CHECK(sent<Round>(a).empty());
  CHECK(a.wake_at == t0 + 6s);
  CHECK(sent<Round>(s.on_tick(t0 + 5s)).empty());
  a = s.on_tick(t0 + 6s);
  CHECK(sent<Round>(a).size() == 2);
}

TEST_CASE("the rendezvous times out when too few nodes join") {
  RoundState s(elastic(2, 4), t0);
  s.on_join(1, node("n1", 1, -1, 2, 4), t0);
  auto a = s.on_tick(t0 + 60s);
  auto exits = sent<Exit>(a);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].second.code == 1);
  CHECK(exits[0].second.reason == "the rendezvous timed out after 60s with 1 of 2:4 nodes");
  CHECK(a.finished);
}

TEST_CASE("a worker failure stops every node, and with restarts left a new round starts") {
  RoundState s(static_two(1), t0);
  s.on_join(1, node("n0", 2, 0, 2, 2, 1), t0);
  s.on_join(2, node("n1", 2, 1, 2, 2, 1), t0);
  auto a = s.on_failed(2, {failure(3, 7, 100)}, t0 + 1s);
  auto stops = sent<Stop>(a);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].first == 1);
  CHECK(stops[0].second.reason == "rank 3 on n1 (10.0.0.1) failed");
  CHECK(s.on_stopped(2, t0 + 1s).send.empty());
  a = s.on_stopped(1, t0 + 2s);
  auto rounds = sent<Round>(a);
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].second.restart_count == 1);
  CHECK(s.restart_count() == 1);
  // and with none left, every node is told to leave with the root cause's exit code
  s.on_failed(1, {failure(0, 9, 200), failure(1, 4, 150)}, t0 + 3s);
  s.on_stopped(1, t0 + 3s);
  a = s.on_stopped(2, t0 + 3s);
  auto exits = sent<Exit>(a);
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].second.code == 4);
  CHECK(exits[0].second.failures.size() == 2);
  CHECK(a.finished);
}

TEST_CASE("every node done is success for all") {
  RoundState s(static_two(), t0);
  s.on_join(1, node("n0", 2, 0), t0);
  s.on_join(2, node("n1", 2, 1), t0);
  CHECK(s.on_done(1, t0 + 1s).send.empty());
  auto exits = sent<Exit>(s.on_done(2, t0 + 2s));
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].second.code == 0);
}

TEST_CASE("a lost node fails a static job on every other node") {
  RoundState s(static_two(3), t0);
  s.on_join(1, node("n0", 2, 0, 2, 2, 3), t0);
  s.on_join(2, node("n1", 2, 1, 2, 2, 3), t0);
  auto a = s.on_lost(2, "connection closed", t0 + 1s);
  auto exits = sent<Exit>(a);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].first == 1);
  CHECK(exits[0].second.code == 1);
  CHECK(exits[0].second.reason == "n1 (10.0.0.1) was lost and the job cannot go on without it");
  REQUIRE(exits[0].second.failures.size() == 1);
  CHECK(exits[0].second.failures[0].rank == 2);
  CHECK(exits[0].second.failures[0].message == "the node was lost (connection closed)");
}

TEST_CASE("a node that leaves on a signal ends a static job with its reason and no failure of its own") {
  RoundState s(static_two(3), t0);
  s.on_join(1, node("n0", 2, 0, 2, 2, 3), t0);
  s.on_join(2, node("n1", 2, 1, 2, 2, 3), t0);
  auto a = s.on_left(2, "it received SIGTERM", t0 + 1s);
  CHECK(a.log == std::vector<std::string>{"n1 (10.0.0.1) left: it received SIGTERM",
                                          "job over (exit code 1): n1 (10.0.0.1) left: it received SIGTERM"});
  auto exits = sent<Exit>(a);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].first == 1);
  CHECK(exits[0].second.code == 1);
  CHECK(exits[0].second.reason == "n1 (10.0.0.1) left: it received SIGTERM");
  CHECK(exits[0].second.failures.empty());
  CHECK(a.drop == std::vector<NodeId>{2});
  CHECK(s.on_lost(2, "connection closed", t0 + 2s).send.empty());  // its hang-up: already gone
}

TEST_CASE("an elastic job above MIN goes on without a node that left, spending no restart") {
  RoundState s(elastic(1, 3), t0);
  for (NodeId id : {1, 2, 3}) s.on_join(id, node("n" + std::to_string(id), 1, -1, 1, 3), t0);
  REQUIRE(s.phase() == RoundState::Phase::running);
  auto stops = sent<Stop>(s.on_left(3, "it received SIGINT", t0 + 1s));
  REQUIRE(stops.size() == 2);
  CHECK(stops[0].second.reason == "n3 (10.0.0.3) left: forming a smaller group");
  CHECK(s.members() == 2);
}

TEST_CASE("an elastic job above MIN re-forms with the survivors and spends no restart") {
  RoundState s(elastic(1, 3), t0);
  s.on_join(1, node("n1", 1, -1, 1, 3), t0);
  s.on_join(2, node("n2", 1, -1, 1, 3), t0);
  s.on_join(3, node("n3", 1, -1, 1, 3), t0);
  REQUIRE(s.phase() == RoundState::Phase::running);
  auto a = s.on_lost(3, "heartbeat timeout", t0 + 1s);
  CHECK(sent<Stop>(a).size() == 2);
  s.on_stopped(1, t0 + 1s);
  a = s.on_stopped(2, t0 + 1s);
  CHECK(sent<Round>(a).empty());  // below MAX: the last call runs first
  a = s.on_tick(t0 + 6s);
  auto rounds = sent<Round>(a);
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].second.world_size == 2);
  CHECK(rounds[0].second.restart_count == 0);
}

TEST_CASE("a node joining a running elastic job below MAX restarts it bigger, spending no restart") {
  RoundState s(elastic(1, 2), t0);
  s.on_join(1, node("n1", 2, -1, 1, 2), t0);
  s.on_tick(t0 + 5s);
  REQUIRE(s.phase() == RoundState::Phase::running);
  auto a = s.on_join(2, node("n2", 2, -1, 1, 2), t0 + 10s);
  auto stops = sent<Stop>(a);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].first == 1);
  a = s.on_stopped(1, t0 + 11s);
  auto rounds = sent<Round>(a);
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].second.world_size == 4);
  CHECK(rounds[0].second.restart_count == 0);
  CHECK(s.round() == 2);
}

TEST_CASE("the root cause is the earliest failure across nodes") {
  CHECK(dtl::exit_code_for({failure(0, 3, 50), failure(5, -11, 20)}) == 139);
  CHECK(dtl::exit_code_for({}) == 1);
}
