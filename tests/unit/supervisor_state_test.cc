#include <catch2/catch.hpp>
#include <signal.h>

#include "launcher/supervisor_state.h"

using namespace dtl::launcher;
using dtl::Failure;

namespace {

/// A Group that records what the policy asked of it.
class FakeGroup final : public Group {
 public:
  void start(const GroupEnv& env) override {
    calls.push_back("start restart " + std::to_string(env.restart_count));
    running = true;
  }
  void stop(int signal) override { calls.push_back("stop " + std::to_string(signal)); }
  void kill() override { calls.push_back("kill"); }
  bool active() const override { return running; }
  /// What the real group does before its on_finished.
  void finished() { running = false; }

  std::vector<std::string> calls;
  bool running = false;
};

Failure failure(int rank, int exitcode, int64_t observed_ns) {
  Failure f;
  f.rank = f.local_rank = rank;
  f.exitcode = exitcode;
  f.observed_ns = observed_ns;
  f.error_file = "<N/A>";
  f.message = "boom";
  return f;
}

GroupEnv env(int max_restarts) {
  GroupEnv e;
  e.max_restarts = max_restarts;
  return e;
}

using W = std::vector<std::string>;

}  // namespace

TEST_CASE("the first attempt starts with restart count 0 and success ends the run with 0 and no summary") {
  FakeGroup g;
  SupervisorState p(g, env(2), "train.py", "node-a");
  p.start();
  CHECK(g.calls == W{"start restart 0"});
  g.finished();
  auto end = p.on_finished({}).ending;
  REQUIRE(end);
  CHECK(end->exit_code == 0);
  CHECK(end->summary.empty());
}

TEST_CASE("a failure with restarts left starts the group again with the next restart count") {
  FakeGroup g;
  SupervisorState p(g, env(2), "train.py", "node-a");
  p.start();
  g.finished();
  CHECK(p.on_finished({{failure(1, 3, 10)}, false, {}}).warnings ==
        W{"restarting the workers (1 of 2 restarts) after rank 1 failed"});
  g.finished();
  CHECK_FALSE(p.on_finished({{failure(0, 3, 10)}, false, {}}).ending);
  CHECK(g.calls == W{"start restart 0", "start restart 1", "start restart 2"});
}

TEST_CASE("when restarts run out the run ends with the root cause's exit code and the summary names this host") {
  FakeGroup g;
  SupervisorState p(g, env(0), "train.py", "node-a");
  p.start();
  g.finished();
  auto end = p.on_finished({{failure(1, 1, 30), failure(0, -11, 20)}, false, {}}).ending;
  REQUIRE(end);
  CHECK(end->exit_code == 128 + SIGSEGV);
  CHECK(end->summary.rfind("\n====", 0) == 0);
  CHECK(end->summary.back() == '\n');
  CHECK(end->summary.find("train.py FAILED") != std::string::npos);
  CHECK(end->summary.find("  host      : node-a\n") != std::string::npos);
  CHECK(end->summary.find("Root Cause (first observed failure):\n[0]:") != std::string::npos);
  CHECK(g.calls == W{"start restart 0"});
}

TEST_CASE("a signal runs the stop sequence with that signal and the run exits 128+N without a restart") {
  FakeGroup g;
  SupervisorState p(g, env(3), "train.py", "node-a");
  p.start();
  CHECK(p.on_signal(SIGINT) == W{"received SIGINT, stopping the workers"});
  CHECK(g.calls == W{"start restart 0", "stop 2"});
  g.finished();
  // a worker that died of the stop itself still counts as the run's end, not a restart
  auto end = p.on_finished({{failure(0, 1, 10)}, false, {}}).ending;
  REQUIRE(end);
  CHECK(end->exit_code == 128 + SIGINT);
  CHECK(g.calls == W{"start restart 0", "stop 2"});
}

TEST_CASE("a second signal while stopping kills the group, and the last signal names the exit code") {
  FakeGroup g;
  SupervisorState p(g, env(0), "train.py", "node-a");
  p.start();
  p.on_signal(SIGTERM);
  CHECK(p.on_signal(SIGINT) == W{"received SIGINT while stopping: killing the workers now"});
  CHECK(g.calls == W{"start restart 0", "stop 15", "kill"});
  g.finished();
  CHECK(p.on_finished({}).ending->exit_code == 128 + SIGINT);
}

TEST_CASE("a signal when no group runs is ignored") {
  FakeGroup g;
  SupervisorState p(g, env(0), "train.py", "node-a");
  CHECK(p.on_signal(SIGTERM).empty());
  CHECK(g.calls.empty());
}

TEST_CASE("a group that could not start ends the run with 1") {
  FakeGroup g;
  SupervisorState p(g, env(2), "train.py", "node-a");
  p.start();
  g.finished();
  auto end = p.on_finished({{}, true, {}}).ending;
  REQUIRE(end);
  CHECK(end->exit_code == 1);
  CHECK(end->summary.empty());
}

TEST_CASE("a restart that cannot start its workers ends with the summary and the code of the failure before it") {
  // Out of descriptors, say: `cannot start worker 0: pipe: Too many open files`.
  FakeGroup g;
  SupervisorState p(g, env(2), "train.py", "node-a");
  p.start();
  g.finished();
  CHECK_FALSE(p.on_finished({{failure(1, 3, 10)}, false, {}}).ending);
  g.finished();
  auto step = p.on_finished({{}, true, {}});
  CHECK(step.warnings == W{"restart 1 could not start its workers: the run ends with the failure before it"});
  REQUIRE(step.ending);
  CHECK(step.ending->exit_code == 3);
  CHECK(step.ending->summary.find("Root Cause (first observed failure):\n[0]:") != std::string::npos);
  CHECK(step.ending->summary.find("  rank      : 1 (local_rank: 1)\n") != std::string::npos);
  CHECK(g.calls == W{"start restart 0", "start restart 1"});  // and no other restart
}

TEST_CASE("the stop sequence is the signal, the grace of --shutdown_timeout, then SIGKILL") {
  auto steps = stop_sequence(SIGINT, 0.5);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].signal == SIGINT);
  CHECK(steps[0].wait == std::chrono::milliseconds(500));
  CHECK(steps[1].signal == SIGKILL);
  CHECK(steps[1].wait == std::chrono::milliseconds(0));
  CHECK(stop_sequence(SIGTERM, 30)[0].wait == std::chrono::seconds(30));
}

TEST_CASE("a worker that could not be reaped ends the run without the restart that was due, exit 1 at least") {
  FakeGroup g;
  SupervisorState p(g, env(3), "train.py", "node-a");
  p.start();
  g.finished();
  Group::Result unreaped{{}, false, {4321}};
  auto step = p.on_finished(unreaped);
  REQUIRE(step.ending);
  CHECK(step.ending->exit_code == 1);
  CHECK(g.calls == W{"start restart 0"});

  SupervisorState q(g, env(3), "train.py", "node-a");
  q.start();
  g.finished();
  step = q.on_finished({{failure(1, 3, 10)}, false, {4321}});
  CHECK(step.warnings == W{"not restarting: 1 process(es) of the last attempt could not be reaped"});
  REQUIRE(step.ending);
  CHECK(step.ending->exit_code == 3);
}
