#include <signal.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <optional>

#include "fanout/fanout_state.h"

using namespace dtl::fanout;
using namespace dtl::fanout::action;

namespace {

int exited(int code) { return code << 8; }  // waitpid's status for exit(code)
int killed_by(int sig) { return sig; }      // and for death by `sig`

FanoutState three(bool master_from_first_host = false) {
  std::vector<FanoutState::Host> hosts;
  for (const char* name : {"a", "b", "c"}) {
    hosts.push_back(
        {name, {{"PET_NODE_RANK", std::string(1, static_cast<char>('0' + hosts.size()))}, {"PET_MASTER_ADDR", "a"}}});
  }
  return FanoutState(std::move(hosts), master_from_first_host, 30, "1.0");
}

template <class A>
std::vector<A> all(const FanoutState::Actions& actions) {
  std::vector<A> out;
  for (const auto& a : actions) {
    if (auto* x = std::get_if<A>(&a)) out.push_back(*x);
  }
  return out;
}

template <class A>
bool has(const FanoutState::Actions& actions) {
  return !all<A>(actions).empty();
}

std::optional<int> finish(const FanoutState::Actions& actions) {
  auto f = all<Finish>(actions);
  return f.empty() ? std::nullopt : std::optional<int>(f.back().exit_code);
}

std::string written(const FanoutState::Actions& actions) {
  std::string out;
  for (const auto& w : all<Write>(actions)) out += w.text;
  return out;
}

/// Every host says hello; returns the last hello's actions (the start).
FanoutState::Actions answer_all(FanoutState& s) {
  FanoutState::Actions a;
  for (size_t i = 0; i < 3; ++i) a = s.on_hello(i, "dtlaunch-node 1.0 10.0.0." + std::to_string(i + 1));
  return a;
}

/// Every host's ssh but `ended` ends with `status`, and every output closes; returns the last actions.
FanoutState::Actions end_all(FanoutState& s, int status, std::optional<size_t> ended = std::nullopt) {
  FanoutState::Actions a;
  for (size_t i = 0; i < 3; ++i) {
    if (i != ended) s.on_exit(i, status);
    a = s.on_output_closed(i);
  }
  return a;
}

}  // namespace

TEST_CASE("fan-out state: the preflight's deadline is armed at the start") {
  auto s = three();
  auto a = s.start();
  REQUIRE(all<Arm>(a).size() == 1);
  CHECK(all<Arm>(a)[0].timer == Timer::preflight);
  CHECK(all<Arm>(a)[0].after == kPreflightTimeout);
}

TEST_CASE("fan-out state: the variables go out once every host answered, not before") {
  auto s = three();
  s.start();
  CHECK(s.on_hello(0, "dtlaunch-node 1.0 10.0.0.1").empty());
  CHECK(s.on_hello(1, "dtlaunch-node 1.0").empty());
  CHECK_FALSE(s.shows_errors());
  auto a = s.on_hello(2, "dtlaunch-node 1.0");
  auto sent = all<Send>(a);
  REQUIRE(sent.size() == 3);
  CHECK(sent[1].host == 1);
  CHECK(sent[1].bytes == encode_variables({{"PET_NODE_RANK", "1"}, {"PET_MASTER_ADDR", "a"}}));
  CHECK(has<Cancel>(a));
  CHECK(s.shows_errors());
}

TEST_CASE("fan-out state: without --master_addr the first host's first address is the master") {
  auto s = three(true);
  s.start();
  auto a = answer_all(s);
  for (const auto& sent : all<Send>(a)) CHECK(sent.bytes.find("PET_MASTER_ADDR=10.0.0.1") != std::string::npos);
  REQUIRE(all<Info>(a).size() == 1);
  CHECK(all<Info>(a)[0].text ==
        "the hosts meet at 10.0.0.1 (the first address host a has; --master_addr chooses another)");
}

TEST_CASE("fan-out state: a host that is not this dtlaunch fails the preflight, exit 2, nothing sent") {
  auto s = three();
  s.start();
  s.on_hello(0, "dtlaunch-node 1.0");
  auto a = s.on_hello(1, "dtlaunch-node 0.9 10.0.0.2");
  CHECK(all<CloseInput>(a).size() == 3);
  // hosts that have not answered (well) run nothing: no grace period for them
  REQUIRE(all<Kill>(a).size() == 2);
  CHECK(all<Kill>(a)[0].host == 1);
  CHECK(all<Kill>(a)[1].host == 2);
  CHECK_FALSE(has<Send>(a));
  CHECK(s.on_hello(2, "dtlaunch-node 1.0").empty());  // too late: nothing starts
  auto end = end_all(s, exited(1));
  CHECK(finish(end) == 2);
  CHECK(written(end) == "dtlaunch: error: host b: runs 0.9, not this dtlaunch 1.0 (preflight; nothing was started)\n");
}

TEST_CASE("fan-out state: a host that says something else than hello fails the preflight") {
  auto s = three();
  s.on_hello(0, "Welcome to node a");
  auto end = end_all(s, exited(1));
  CHECK(written(end) ==
        "dtlaunch: error: host a: said Welcome to node a instead of hello (preflight; nothing was started)\n");
  CHECK(finish(end) == 2);
}

TEST_CASE("fan-out state: a host whose ssh ends unanswered is reported by ssh's last line, read to the end") {
  auto s = three();
  s.start();
  s.on_error_output(1, "Warning: Permanently added 'b'\r\nssh: connect to host b port 22: Conn");
  auto a = s.on_exit(1, exited(255));
  CHECK(all<Kill>(a).size() == 3);  // b's leftovers, and a and c, which never answered
  CHECK_FALSE(finish(a));
  s.on_error_output(1, "ection refused\r\n\n");
  auto end = end_all(s, killed_by(SIGTERM), 1);
  CHECK(
      written(end) ==
      "dtlaunch: error: host b: ssh: connect to host b port 22: Connection refused (preflight; nothing was started)\n");
  CHECK(finish(end) == 2);
}

TEST_CASE("fan-out state: an ssh that ends without a word is reported by how it ended") {
  auto s = three();
  s.on_exit(0, exited(255));
  auto end = end_all(s, exited(1), 0);
  CHECK(written(end) == "dtlaunch: error: host a: ssh ended with exit code 255 (preflight; nothing was started)\n");
}

TEST_CASE("fan-out state: a last error line without a newline counts once the output ends") {
  auto s = three();
  s.on_error_output(2, "bash: dtlaunch: command not found");
  s.on_exit(2, exited(127));
  auto end = end_all(s, exited(1), 2);
  CHECK(written(end) ==
        "dtlaunch: error: host c: bash: dtlaunch: command not found (preflight; nothing was started)\n");
}

TEST_CASE("fan-out state: a host that ends after its hello, before the job started, fails the preflight") {
  auto s = three();
  s.on_hello(0, "dtlaunch-node 1.0");
  auto a = s.on_exit(0, exited(0));
  CHECK(all<CloseInput>(a).size() == 3);
  auto end = end_all(s, exited(1), 0);
  CHECK(written(end) ==
        "dtlaunch: error: host a: ended after its hello with exit code 0, before the job started (preflight; "
        "nothing was started)\n");
  CHECK(finish(end) == 2);
}

TEST_CASE("fan-out state: no answer by the deadline names the first quiet host") {
  auto s = three();
  s.on_hello(0, "dtlaunch-node 1.0");
  auto a = s.on_timer(Timer::preflight);
  CHECK(all<Kill>(a).size() == 2);
  auto end = end_all(s, killed_by(SIGTERM));
  CHECK(written(end) == "dtlaunch: error: host b: no answer in 30 s (preflight; nothing was started)\n");
  CHECK(finish(end) == 2);
}

TEST_CASE("fan-out state: the deadline after the start does nothing") {
  auto s = three();
  answer_all(s);
  CHECK(s.on_timer(Timer::preflight).empty());
}

TEST_CASE("fan-out state: a failed agent stops the others, and its code is the job's") {
  auto s = three();
  answer_all(s);
  auto a = s.on_exit(1, exited(3));
  CHECK(written(a) == "dtlaunch: host b's agent ended with exit code 3; stopping the other hosts\n");
  CHECK(all<CloseInput>(a).size() == 3);
  CHECK(all<Kill>(a).size() == 1);  // b's leftovers only: the others get their grace period
  REQUIRE(all<Arm>(a).size() == 1);
  CHECK(all<Arm>(a)[0].timer == Timer::kill);
  CHECK(all<Arm>(a)[0].after == std::chrono::milliseconds(40000));
  s.on_output_closed(1);
  s.on_exit(0, killed_by(SIGTERM));
  s.on_output_closed(0);
  s.on_exit(2, exited(143));
  CHECK(finish(s.on_output_closed(2)) == 3);
}

TEST_CASE("fan-out state: the kill timer sends SIGTERM, then SIGKILL 5 s later, to ssh still running") {
  auto s = three();
  answer_all(s);
  s.on_signal(SIGINT);
  s.on_exit(0, exited(130));
  auto a = s.on_timer(Timer::kill);
  REQUIRE(all<Kill>(a).size() == 2);
  CHECK(all<Kill>(a)[0].signal == SIGTERM);
  CHECK(all<Arm>(a)[0].after == std::chrono::seconds(5));
  a = s.on_timer(Timer::kill);
  REQUIRE(all<Kill>(a).size() == 2);
  CHECK(all<Kill>(a)[1].signal == SIGKILL);
  CHECK_FALSE(has<Arm>(a));
}

TEST_CASE("fan-out state: Ctrl-C stops every host and exits 130; a second one sends SIGTERM at once") {
  auto s = three();
  answer_all(s);
  auto a = s.on_signal(SIGINT);
  CHECK(written(a) == "dtlaunch: stopping 3 hosts (Interrupt)\n");
  CHECK(all<CloseInput>(a).size() == 3);
  CHECK_FALSE(has<Kill>(a));
  a = s.on_signal(SIGINT);
  CHECK(all<Kill>(a).size() == 3);
  CHECK(finish(end_all(s, exited(130))) == 130);
}

TEST_CASE("fan-out state: Ctrl-C during the preflight starts nothing") {
  auto s = three();
  s.on_hello(0, "dtlaunch-node 1.0");
  s.on_signal(SIGTERM);
  CHECK_FALSE(has<Send>(s.on_hello(1, "dtlaunch-node 1.0")));
  CHECK_FALSE(has<Send>(s.on_hello(2, "dtlaunch-node 1.0")));
  auto end = end_all(s, exited(1));
  CHECK(written(end).empty());
  CHECK(finish(end) == 128 + SIGTERM);
}

TEST_CASE("fan-out state: SIGUSR1 and SIGUSR2 go to every running host's workers, and stop nothing") {
  auto s = three();
  CHECK(s.on_signal(SIGUSR1).empty());  // no workers yet
  answer_all(s);
  s.on_exit(2, exited(0));
  auto a = s.on_signal(SIGUSR2);
  REQUIRE(all<Send>(a).size() == 2);
  CHECK(all<Send>(a)[0].bytes == "signal USR2\n");
  CHECK_FALSE(has<CloseInput>(a));
  CHECK(finish(end_all(s, exited(0), 2)) == 0);
}

TEST_CASE("fan-out state: output still open after every ssh ended is read for kDrainTimeout at most") {
  auto s = three();
  answer_all(s);
  for (size_t i = 0; i < 3; ++i) s.on_exit(i, exited(0));
  auto a = s.on_output_closed(0);
  REQUIRE(all<Arm>(a).size() == 0);  // armed at the last exit already
  a = s.on_timer(Timer::drain);
  CHECK(finish(a) == 0);
  CHECK(s.finished());
}

TEST_CASE("fan-out state: the exit code is the first host's non-zero code when nothing failed first") {
  auto s = three();
  answer_all(s);
  s.on_exit(0, exited(0));
  s.on_output_closed(0);
  // a signal-killed ssh after the others stopped: 128 + its signal
  s.on_signal(SIGHUP);
  s.on_exit(1, killed_by(SIGKILL));
  s.on_output_closed(1);
  s.on_exit(2, exited(0));
  CHECK(finish(s.on_output_closed(2)) == 128 + SIGHUP);
}
