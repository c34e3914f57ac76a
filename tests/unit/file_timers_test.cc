#include <signal.h>
#include <catch2/catch.hpp>

#include "watch/file_timers.h"

using namespace dtl::watch;

TEST_CASE("expiration timers: FileTimerClient's JSON lines, and what is no request") {
  auto r = parse_timer_request(
      R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1700000000.5, "signal": 9})");
  REQUIRE(r);
  CHECK(r->pid == 4242);
  CHECK(r->scope == "step");
  CHECK(r->expiration_time == Approx(1700000000.5));
  CHECK(r->signal == SIGKILL);
  auto release =
      parse_timer_request(R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": -1, "signal": 0})");
  REQUIRE(release);
  CHECK(release->expiration_time < 0);
  CHECK_FALSE(parse_timer_request("not json"));
  CHECK_FALSE(parse_timer_request(R"({"pid": 1})"));
  CHECK_FALSE(parse_timer_request(R"({"pid": -5, "scope_id": "s", "expiration_time": 1, "signal": 9})"));
  CHECK_FALSE(parse_timer_request(R"({"pid": 5, "scope_id": "s", "expiration_time": 1, "signal": 999})"));
}

TEST_CASE("expiration timers: one per pid and scope, released by a negative time, the earliest signal wins") {
  TimerTable t;
  t.on_request({10, "a", 100, SIGTERM});
  t.on_request({10, "b", 90, 0});
  t.on_request({10, "c", 95, SIGKILL});
  t.on_request({11, "a", 200, SIGKILL});
  t.on_request({12, "a", 50, SIGKILL});
  t.on_request({12, "a", -1, 0});  // released in time
  CHECK(t.expire(80).empty());
  auto fired = t.expire(120);
  REQUIRE(fired.size() == 1);
  CHECK(fired[0].pid == 10);
  CHECK(fired[0].signal == SIGKILL);  // "c" expired before "a"; "b" has no signal
  CHECK(fired[0].scopes == std::vector<std::string>{"b", "c", "a"});
  CHECK(t.expire(150).empty());           // pid 10's timers are gone
  t.on_request({11, "a", 300, SIGKILL});  // re-armed: the later time holds
  CHECK(t.expire(250).empty());
  CHECK(t.expire(300).size() == 1);
  CHECK(t.empty());
  t.on_request({13, "x", 10, 0});
  auto quiet = t.expire(20);
  REQUIRE(quiet.size() == 1);
  CHECK(quiet[0].signal == 0);
}

TEST_CASE("expiration timers: lines that are no request are shown printable three times, then counted") {
  using namespace std::chrono_literals;
  BadLineLog log(10s);
  const BadLineLog::Clock::time_point t0{};
  CHECK(log.note("\x1b[2J\rdtlaunch: forged", t0) ==
        "expiration timers: not a FileTimerClient request: \\x1b[2J\\rdtlaunch: forged");
  CHECK(log.note("b", t0));
  CHECK(log.note("c", t0) ==
        "expiration timers: not a FileTimerClient request: c (more such lines are counted, not shown)");
  CHECK_FALSE(log.due());
  for (int i = 0; i < 1997; ++i) CHECK_FALSE(log.note(std::string(5000, 'x'), t0 + 1s));
  CHECK(log.due() == t0 + 11s);
  CHECK(log.summary() == "expiration timers: 1997 more lines that are not FileTimerClient requests");
  CHECK_FALSE(log.due());
  CHECK_FALSE(log.summary());
  CHECK_FALSE(log.note("d", t0 + 30s));
  CHECK(log.due() == t0 + 40s);
  CHECK(log.summary() == "expiration timers: 1 more line that is not a FileTimerClient request");
}
