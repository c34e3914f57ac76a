#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>

#include "watch/flight_recorder.h"
#include "watch/hang_report.h"
#include "watch/stacks.h"

using namespace dtl::watch;

namespace {

dtl::EnvLookup lookup(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    if (auto it = vars.find(name); it != vars.end()) return it->second;
    return std::nullopt;
  };
}

std::optional<std::string> value(const dtl::EnvPairs& env, const std::string& name) {
  for (const auto& [k, v] : env) {
    if (k == name) return v;
  }
  return std::nullopt;
}

// What the analyzer prints for rank 1 calling broadcast where rank 0 calls all_reduce, after 3 good ones.
const char* kWrongType =
    R"({"version": "2.10", "ranks": [0, 1], "collectives": 3, "problems": 1, "compared_with": 0, "pg": "0",
        "pg_desc": "default_pg", "seq": 4, "kind": "COLLECTIVE_TYPE_MISMATCH", "detail": "Expected collective type",
        "expected": [0, 1], "missing": [], "culprits": [1],
        "entered": {"0": {"seq": 4, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float", "retired": false},
                    "1": {"seq": 4, "op": "broadcast", "sizes": "[[4]]", "dtypes": "Float", "retired": false}},
        "never_entered": {}})";

}  // namespace

TEST_CASE("flight recorder: the workers record where the user did not choose, and keep what they chose") {
  auto [vars, paths] = recorder_variables(lookup({}), "/logs/run/attempt_0");
  CHECK(paths.on);
  CHECK(paths.folder == "/logs/run/attempt_0/fr_read");
  CHECK(paths.dumps == "/logs/run/attempt_0/fr");
  CHECK(value(vars, "TORCH_FR_BUFFER_SIZE") == "2000");
  CHECK(value(vars, "TORCH_FR_DUMP_TEMP_FILE") == "/logs/run/attempt_0/fr/rank_");
  CHECK(value(vars, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/logs/run/attempt_0/nccl_pipe_");

  // the older names count as the user's choice: torch reads them after the new ones
  auto [mine, my_paths] = recorder_variables(
      lookup({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "64"}, {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/mine_"}}), "/a");
  CHECK_FALSE(value(mine, "TORCH_FR_BUFFER_SIZE"));
  CHECK_FALSE(value(mine, "TORCH_FR_DUMP_TEMP_FILE"));
  CHECK(my_paths.dump_prefix == "/tmp/mine_");
  CHECK(my_paths.dumps.empty());  // the user's folder is not dtlaunch's to make

  auto [off, off_paths] = recorder_variables(lookup({{"TORCH_FR_BUFFER_SIZE", "0"}}), "/a");
  CHECK(off.empty());
  CHECK_FALSE(off_paths.on);
}

TEST_CASE("flight recorder: torch's analyzer's verdict names the collective and picks the suspect") {
  const auto v = parse_verdict(kWrongType);
  REQUIRE(v.error.empty());
  CHECK(v.seq == 4);
  CHECK(v.kind == "COLLECTIVE_TYPE_MISMATCH");
  CHECK(verdict_suspect(v) == 1);
  const auto text = verdict_text(v);
  CHECK(text.find("the ranks part at collective #4 of process group default_pg: not the same collective "
                  "(COLLECTIVE_TYPE_MISMATCH, torch's analyzer)") != std::string::npos);
  CHECK(text.find("  rank 1: broadcast #4, sizes [[4]], Float   <- not as rank 0\n") != std::string::npos);
  CHECK(verdict_reason(v, 1) ==
        "calls broadcast [[4]] Float where rank 0 calls all_reduce [[4]] Float at collective #4 of process group "
        "default_pg (flight recorder: not the same collective)");
  CHECK(verdict_reason(v, 0).empty());

  // every rank waits in a collective: the stacks name no one, the verdict does
  Hang h;
  for (int r : {0, 1}) {
    HungRank rank;
    rank.rank = r;
    rank.pid = 100 + r;
    rank.state = 'S';
    rank.stack = {"thread MainThread (1)", r ? "broadcast (torch/distributed/distributed_c10d.py:2700)"
                                             : "all_reduce (torch/distributed/distributed_c10d.py:2950)"};
    h.ranks.push_back(rank);
  }
  CHECK_FALSE(find_suspect(h));
  h.collective = v;
  const auto suspect = find_suspect(h);
  REQUIRE(suspect);
  CHECK(h.ranks[*suspect].rank == 1);
  CHECK(hang_failure(h, &h.ranks[*suspect]).find("suspect: calls broadcast [[4]] Float") != std::string::npos);

  CHECK_FALSE(parse_verdict(R"({"error": "no torch"})").error.empty());
  CHECK_FALSE(parse_verdict("Traceback (most recent call last):").error.empty());
}

TEST_CASE("flight recorder: a rank that never entered the collective is named so") {
  const auto v = parse_verdict(
      R"({"ranks": [0, 1], "collectives": 4, "problems": 1, "compared_with": 0, "pg": "0", "pg_desc": "default_pg",
          "seq": 4, "kind": "MISSING_RANKS", "expected": [0, 1], "missing": [1], "culprits": [],
          "entered": {"0": {"seq": 4, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float"}},
          "never_entered": {"1": {"seq": 3, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float",
                                  "retired": true}}})");
  CHECK(verdict_suspect(v) == 1);
  CHECK(verdict_text(v).find("  rank 1: never entered it; its last: all_reduce #3, sizes [[4]], Float, finished\n") !=
        std::string::npos);
  CHECK(verdict_reason(v, 1) == "never entered collective #4 of process group default_pg (flight recorder)");
}

TEST_CASE("flight recorder: a state mismatch names no suspect: the ranks behind may be the ones waiting") {
  const auto v = parse_verdict(
      R"({"ranks": [0, 1, 2], "collectives": 4, "problems": 1, "compared_with": 0, "pg": "0", "pg_desc": "default_pg",
          "seq": 4, "kind": "COLLECTIVE_STATE_MISMATCH", "expected": [0, 1, 2], "missing": [], "culprits": [1, 2],
          "entered": {"0": {"seq": 4, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float"}}})");
  REQUIRE(v.error.empty());
  CHECK_FALSE(verdict_suspect(v));
  CHECK(verdict_reason(v, 1).empty());
}

TEST_CASE("flight recorder: the oldest collective not completed for the timeout is the hang's cause") {
  const std::string progress =
      R"({"0": {"seq": 4, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float", "pg": "0", "state": "started",
                "age_s": 31.5},
          "2": {"seq": 9, "op": "broadcast", "sizes": "[[4]]", "dtypes": "Float", "pg": "1", "state": "", "age_s": 40}})";
  const auto stall = find_stall(progress, 30);
  REQUIRE(stall);
  CHECK(stall->rank == 2);
  CHECK(
      stall_cause(*stall) ==
      "rank 2's broadcast #9 of process group 1 has not completed in 40 s (flight recorder), while every rank is busy");
  const auto started =
      find_stall(R"({"0": {"seq": 4, "op": "all_reduce", "pg": "0", "state": "started", "age_s": 31.5}})", 30);
  REQUIRE(started);
  CHECK(stall_cause(*started) ==
        "rank 0's all_reduce #4 of process group 0 has not completed in 32 s (flight recorder: started), while every "
        "rank is busy");
  CHECK_FALSE(find_stall(progress, 60));  // younger than the timeout: a long collective, not a hang
  CHECK_FALSE(find_stall("{}", 30));
  CHECK_FALSE(find_stall("not json", 30));
}

TEST_CASE("flight recorder: where every rank is busy and none waits, the verdict picks the suspect") {
  Hang hang;
  for (int r = 0; r < 2; ++r) {
    HungRank h;
    h.rank = r;
    h.busy = true;
    h.stack = {"thread MainThread", "<module> (part.py:2" + std::to_string(r) + ")"};
    hang.ranks.push_back(h);
  }
  CHECK_FALSE(find_suspect(hang));  // the stacks alone tell neither rank from the other
  hang.collective = parse_verdict(
      R"({"ranks": [0, 1], "collectives": 4, "problems": 1, "compared_with": 0, "pg": "0", "pg_desc": "default_pg",
          "seq": 4, "kind": "MISSING_RANKS", "expected": [0, 1], "missing": [1], "culprits": [],
          "entered": {"0": {"seq": 4, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float"}},
          "never_entered": {"1": {"seq": 3, "op": "all_reduce", "sizes": "[[4]]", "dtypes": "Float"}}})");
  REQUIRE(hang.collective.error.empty());
  CHECK(find_suspect(hang) == 1u);
}

TEST_CASE("flight recorder: the hook's thread is left out of a rank's stack") {
  const std::vector<std::string> stack{"thread MainThread (1)",
                                       "all_reduce (torch/distributed/distributed_c10d.py:2950)", "",
                                       "thread dtlaunch-flight-recorder (2)",
                                       "_dtlaunch_flight_recorder.<locals>.serve (/logs/python/sitecustomize.py:80)"};
  CHECK(without_hook_thread(stack) ==
        std::vector<std::string>{"thread MainThread (1)", "all_reduce (torch/distributed/distributed_c10d.py:2950)"});
}

TEST_CASE("straggler watch: the rank that arrives last at most collectives is named, an even job's none") {
  Arrivals slow, even;
  for (long seq = 1; seq <= 20; ++seq) {
    const int64_t t = seq * 1'000'000'000;
    for (int r : {0, 1, 2}) {
      slow[r].push_back({"0", seq, t + r * 1'000'000 + (r == 2 ? 150'000'000 : 0)});
      even[r].push_back({"0", seq, t + ((seq + r) % 3) * 1'000'000});  // each rank last a third of the time
    }
  }
  const auto s = find_straggler(slow);
  REQUIRE(s);
  CHECK(s->rank == 2);
  CHECK(s->last_at == 20);
  CHECK(s->of == 20);
  CHECK(s->mean_late_ms == Approx(151));
  CHECK_FALSE(find_straggler(even));

  Arrivals few;
  for (int r : {0, 1}) few[r] = {{"0", 1, r * 100'000'000}};
  CHECK_FALSE(find_straggler(few));  // too few collectives yet

  StragglerState state(std::chrono::minutes(5));
  const auto t0 = StragglerState::Clock::now();
  const auto line = state.on_sample(t0, slow, "node-a");
  REQUIRE(line);
  CHECK(*line ==
        "slow rank: rank 2 on node-a arrives last at 20 of the last 20 collectives, 151 ms after the next rank on "
        "average (the flight recorder's arrival times)");
  CHECK_FALSE(state.on_sample(t0 + std::chrono::minutes(1), slow, "node-a"));  // one line at most every 5 minutes
  CHECK(state.latest());
  CHECK(state.on_sample(t0 + std::chrono::minutes(6), slow, "node-a"));
  CHECK_FALSE(state.on_sample(t0 + std::chrono::minutes(7), even, "node-a"));
  CHECK_FALSE(state.latest());

  CHECK(parse_arrivals(R"([["0", 1, 1700000000000000000, "gloo:all_reduce"]])").size() == 1);
  CHECK(parse_arrivals("not json").empty());
}
