#include "rendezvous/admission.h"

#include <catch2/catch.hpp>

using namespace dtl::rendezvous;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0{};

AdmissionLimits limits(size_t total, size_t per_source) {
  AdmissionLimits l;
  l.total = total;
  l.per_source = per_source;
  return l;
}

}  // namespace

TEST_CASE("the limits follow the fd limit: a quarter for unauthenticated peers, a quarter of that per address") {
  CHECK(admission_limits(1024).total == 256);
  CHECK(admission_limits(1024).per_source == 64);
  CHECK(admission_limits(256).total == 64);
  CHECK(admission_limits(256).per_source == 16);
  CHECK(admission_limits(1 << 20).total == 1024);
  CHECK(admission_limits(8).total == 4);
  CHECK(admission_limits(8).per_source == 1);
  CHECK(admission_limits(1024).deadline == 3s);
}

TEST_CASE("an address at its limit is shed while its connections are young, and makes room from its own stalled ones") {
  Admission a(limits(10, 2));
  CHECK(a.arrive(1, "10.0.0.1", t0).admitted);
  CHECK(a.arrive(2, "10.0.0.1", t0 + 10ms).admitted);
  auto v = a.arrive(3, "10.0.0.1", t0 + 100ms);
  CHECK_FALSE(v.admitted);
  CHECK_FALSE(v.evicted);
  CHECK(a.arrive(4, "10.0.0.2", t0 + 100ms).admitted);  // another address is not held up
  v = a.arrive(5, "10.0.0.1", t0 + 1s);
  CHECK(v.admitted);
  CHECK(v.evicted == NodeId{1});
  CHECK(a.from("10.0.0.1") == 2);
  CHECK(a.size() == 3);
}

TEST_CASE("when every place is taken, the address holding the most gives way to a newcomer from another") {
  Admission a(limits(4, 4));
  for (NodeId id : {1, 2, 3}) REQUIRE(a.arrive(id, "attacker", t0).admitted);
  REQUIRE(a.arrive(4, "10.0.0.9", t0).admitted);
  auto v = a.arrive(5, "node", t0 + 1ms);
  CHECK(v.admitted);
  CHECK(v.evicted == NodeId{1});
  CHECK(a.from("attacker") == 2);
}

TEST_CASE("a newcomer is shed when no address holds more than it would, unless the oldest of all is stalled") {
  Admission a(limits(3, 3));
  REQUIRE(a.arrive(1, "a", t0).admitted);
  REQUIRE(a.arrive(2, "b", t0 + 1ms).admitted);
  REQUIRE(a.arrive(3, "c", t0 + 2ms).admitted);
  CHECK_FALSE(a.arrive(4, "d", t0 + 500ms).admitted);
  auto v = a.arrive(5, "d", t0 + 1s);
  CHECK(v.admitted);
  CHECK(v.evicted == NodeId{1});
}

TEST_CASE("a connection that proved the token, or closed, no longer counts") {
  Admission a(limits(2, 2));
  REQUIRE(a.arrive(1, "a", t0).admitted);
  REQUIRE(a.arrive(2, "a", t0).admitted);
  a.leave(1);
  a.leave(1);  // twice: ignored
  a.leave(42);
  CHECK(a.size() == 1);
  CHECK(a.from("a") == 1);
  CHECK(a.arrive(3, "a", t0).admitted);
}

TEST_CASE("connections past the handshake deadline are listed oldest first") {
  Admission a(limits(10, 10));
  REQUIRE(a.arrive(1, "a", t0).admitted);
  REQUIRE(a.arrive(2, "b", t0 + 1s).admitted);
  CHECK(a.expired(t0 + 2999ms).empty());
  CHECK(a.expired(t0 + 3s) == std::vector<NodeId>{1});
  CHECK(a.expired(t0 + 4s) == std::vector<NodeId>{1, 2});
  CHECK_FALSE(a.oldest_stale(t0 + 999ms));
  CHECK(a.oldest_stale(t0 + 1s) == NodeId{1});
}

TEST_CASE("IPv6 peers are counted by their /64, IPv4-mapped ones as the IPv4 address") {
  using boost::asio::ip::make_address;
  CHECK(source_of(make_address("10.0.0.1")) == "10.0.0.1");
  CHECK(source_of(make_address("::ffff:10.0.0.1")) == "10.0.0.1");
  CHECK(source_of(make_address("2001:db8:0:1::1")) == "2001:db8:0:1::/64");
  CHECK(source_of(make_address("2001:db8:0:1:ffff:1:2:3")) == "2001:db8:0:1::/64");
}
