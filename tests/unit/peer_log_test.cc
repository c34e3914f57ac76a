#include "rendezvous/peer_log.h"

#include <catch2/catch.hpp>

using namespace dtl::rendezvous;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0{};
}

TEST_CASE("the first connection after a quiet interval is said in full, the rest are summed up once per interval") {
  PeerLog log(10s);
  CHECK(log.note(Ending::refused, "10.0.0.2", "refused 10.0.0.2: wrong token", t0) == "refused 10.0.0.2: wrong token");
  CHECK_FALSE(log.due());
  CHECK_FALSE(log.note(Ending::refused, "10.0.0.2", "refused 10.0.0.2: wrong token", t0 + 1s));
  CHECK(log.due() == t0 + 10s);
  CHECK(log.summary(t0 + 10s) ==
        "1 more connection from peers that did not prove the token ended in the last 10 s: 1 refused; from "
        "10.0.0.2");
  CHECK_FALSE(log.due());
  CHECK_FALSE(log.summary(t0 + 11s));
  // The summary was a line: the next one waits for the interval after it.
  CHECK_FALSE(log.note(Ending::dropped, "10.0.0.3", "dropped", t0 + 12s));
  CHECK(log.due() == t0 + 20s);
  CHECK(log.summary(t0 + 20s)->find("1 broke the protocol") != std::string::npos);
  CHECK(log.note(Ending::dropped, "10.0.0.3", "dropped", t0 + 31s) == "dropped");
}

TEST_CASE("a thousand connections in an interval make one line with the count, how they ended and the busiest address") {
  PeerLog log(10s);
  REQUIRE(log.note(Ending::shed, "10.0.0.9", "first", t0));
  for (int i = 0; i < 1000; ++i) {
    const Ending how = i < 700 ? Ending::shed : i < 950 ? Ending::timed_out : Ending::hung_up;
    const std::string source = i < 600 ? "10.0.0.2" : "10.0.0." + std::to_string(3 + i % 5);
    REQUIRE_FALSE(log.note(how, source, "line " + std::to_string(i), t0 + 1ms * i));
  }
  CHECK(log.summary(t0 + 10s) ==
        "1000 more connections from peers that did not prove the token ended in the last 10 s: 50 hung up, 250 did "
        "not finish the handshake in time, 700 over the connection limits; from 6 addresses, most from 10.0.0.2 (600)");
}

TEST_CASE("the summary at the end says how long it covers, rounded up to a second") {
  PeerLog log(10s);
  REQUIRE(log.note(Ending::shed, "a", "first", t0));
  REQUIRE_FALSE(log.note(Ending::shed, "a", "second", t0 + 100ms));
  CHECK(log.summary(t0 + 2100ms)->find("in the last 3 s:") != std::string::npos);
}
