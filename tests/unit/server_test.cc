// The server's defences against peers that never prove the token, on loopback with raw sockets in
// this process: the io_context runs until what is checked happened, or a bounded time passed.
#include "rendezvous/server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <functional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>

#include "rendezvous/client.h"
#include "tests/support/loopback.h"

using namespace dtl::rendezvous;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

using dtl::test::run_until;
using dtl::test::stalled;

namespace {

ServerOptions options(size_t total = 8, size_t per_source = 4) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.credentials = {"job42", "s3cret"};
  o.round.min_nodes = o.round.max_nodes = 2;
  AdmissionLimits limits;
  limits.total = total;
  limits.per_source = per_source;
  o.admission = limits;
  return o;
}

/// Nodes 0 and 1 of a static job of two, joined to `server`; `more` adds to each one's callbacks.
std::vector<std::unique_ptr<Client>> two_nodes(asio::io_context& io, Server& server, int& rounds,
                                               const std::function<void(int, Client::Callbacks&)>& more = {}) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int rank : {0, 1}) {
    ClientOptions c;
    c.host = "127.0.0.1";
    c.port = server.port();
    c.credentials = {"job42", "s3cret"};
    c.join.host = "node-" + std::to_string(rank);
    c.join.node_rank = rank;
    c.join.min_nodes = c.join.max_nodes = 2;
    Client::Callbacks cb{[&rounds](const Round&) { ++rounds; }, [](const Stop&) {}, [](const Exit&) {},
                         [](const std::string& why, bool) { FAIL(why); }};
    if (more) more(rank, cb);
    clients.push_back(std::make_unique<Client>(io, c, cb));
    clients.back()->start();
  }
  return clients;
}

}  // namespace

TEST_CASE("connections past the caps are closed at once, and stalled ones at the handshake deadline") {
  asio::io_context io;
  auto o = options(8, 4);
  o.admission->deadline = 300ms;
  o.liveness.interval = 100ms;
  Server server(io, o);
  auto socks = stalled(io, server.port(), 20, {"127.0.0.2", "127.0.0.3", "127.0.0.4"});
  REQUIRE(run_until(io, [&] { return server.stats().accepted == 20; }));
  CHECK(server.stats().unauthenticated == 8);
  CHECK(server.stats().shed == 12);
  REQUIRE(run_until(io, [&] { return server.stats().unauthenticated == 0; }));
  CHECK(server.connections() == 0);
}

TEST_CASE("out of file descriptors, the server tries accept() again after a pause instead of spinning") {
  asio::io_context io;
  auto o = options();
  o.accept_backoff = 100ms;
  Server server(io, o);
  auto socks = stalled(io, server.port(), 3);  // waiting in the listen backlog: the loop has not run
  const long ms = dtl::test::run_out_of_descriptors(io, 500ms);
  const auto failures = server.stats().accept_failures;
  CHECK(failures >= 1);
  CHECK(failures <= static_cast<size_t>(ms / 100 + 2));  // spinning made ~50,000 a second
  CHECK(server.stats().accepted == 0);
  // Descriptors back: the waiting connections are taken.
  CHECK(run_until(io, [&] { return server.stats().accepted == 3; }));
}

TEST_CASE("the end of the job waits for the members only, not for peers that never proved the token") {
  asio::io_context io;
  Server server(io, options());
  auto socks = stalled(io, server.port(), 3);
  REQUIRE(run_until(io, [&] { return server.stats().unauthenticated == 3; }));
  bool empty = false;
  server.end_job("test over");
  server.when_empty([&] { empty = true; });
  CHECK(empty);
}

TEST_CASE("a client that leaves says why before it hangs up, and the others are told that reason") {
  asio::io_context io;
  Server server(io, options());
  int rounds = 0;
  std::optional<Exit> exit;
  auto clients = two_nodes(io, server, rounds, [&](int, Client::Callbacks& cb) { cb.on_exit = [&](const Exit& e) { exit = e; }; });
  REQUIRE(run_until(io, [&] { return rounds == 2; }));
  clients[1]->leave(Leaving{"it received SIGTERM"});
  REQUIRE(run_until(io, [&] { return exit.has_value(); }));
  CHECK(exit->code == 1);
  CHECK(exit->reason == "node-1 (127.0.0.1) left: it received SIGTERM");
  CHECK(exit->failures.empty());  // no failure of its own: the reason is the whole story
  CHECK(run_until(io, [&] { return server.connections() == 1; }));  // its hang-up followed
}

TEST_CASE("every node's stacks: gathered for the asker, a hang's once a round for the host, and a verdict for all") {
  asio::io_context io;
  auto o = options();
  std::vector<std::vector<std::string>> hang_parts;
  std::vector<std::string> hang_missing;
  o.on_hang_stacks = [&](std::vector<std::string> parts, const std::string& missing) {
    std::sort(parts.begin(), parts.end());
    hang_parts.push_back(parts);
    hang_missing.push_back(missing);
  };
  Server server(io, o);
  int rounds = 0;
  std::vector<std::string> relayed;  // what node 0 received of its own ask
  std::optional<StacksEnd> end;
  std::vector<HangVerdict> verdicts;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<uint32_t> kinds;  // of the asks node 0 got
  clients = two_nodes(io, server, rounds, [&](int rank, Client::Callbacks& cb) {
    cb.on_stacks_ask = [&, rank](const StacksAsk& a) {
      if (rank == 0) kinds.push_back(a.kind);
      clients[rank]->send(StacksPart{a.id, "part of node-" + std::to_string(rank)});
    };
    cb.on_stacks_part = [&](const StacksPart& p) {
      CHECK(p.id == 41);  // the asker's id, not the server's
      relayed.push_back(p.part);
    };
    cb.on_stacks_end = [&](const StacksEnd& e) { end = e; };
    cb.on_hang_verdict = [&](const HangVerdict& v) { verdicts.push_back(v); };
  });
  REQUIRE(run_until(io, [&] { return rounds == 2; }));

  clients[0]->send(StacksWanted{41, kGatherStacks});
  REQUIRE(run_until(io, [&] { return end.has_value(); }));
  std::sort(relayed.begin(), relayed.end());
  CHECK(relayed == std::vector<std::string>{"part of node-0", "part of node-1"});
  CHECK(end->id == 41);
  CHECK(end->missing.empty());
  CHECK(hang_parts.empty());

  // every rank's figures: each node is asked for that kind of part, and the parts come back the same way
  relayed.clear();
  end.reset();
  clients[0]->send(StacksWanted{41, kGatherRanks});
  REQUIRE(run_until(io, [&] { return end.has_value(); }));
  CHECK(relayed.size() == 2);
  CHECK(kinds == std::vector<uint32_t>{kGatherStacks, kGatherRanks});

  // both nodes see the hang; the host gets one gathering of the round's parts
  clients[1]->send(StacksWanted{1, kGatherHang});
  clients[0]->send(StacksWanted{2, kGatherHang});
  REQUIRE(run_until(io, [&] { return hang_parts.size() == 1; }));
  CHECK(hang_parts[0] == std::vector<std::string>{"part of node-0", "part of node-1"});
  CHECK(hang_missing[0].empty());
  CHECK_FALSE(run_until(io, [&] { return hang_parts.size() > 1; }, 300ms));

  server.announce(HangVerdict{1, "hang: no rank printed for 10 s (suspect: blocked)"});
  REQUIRE(run_until(io, [&] { return verdicts.size() == 2; }));
  CHECK(verdicts[0] == HangVerdict{1, "hang: no rank printed for 10 s (suspect: blocked)"});
}

TEST_CASE("every node's stacks: a node that does not answer is named as missing when the time is up") {
  asio::io_context io;
  auto o = options();
  o.stacks_timeout = 300ms;
  Server server(io, o);
  int rounds = 0;
  std::optional<StacksEnd> end;
  std::vector<std::unique_ptr<Client>> clients;
  clients = two_nodes(io, server, rounds, [&](int rank, Client::Callbacks& cb) {
    if (rank == 0) {  // node 1 never answers
      cb.on_stacks_ask = [&](const StacksAsk& a) { clients[0]->send(StacksPart{a.id, "node-0's"}); };
    }
    cb.on_stacks_end = [&](const StacksEnd& e) { end = e; };
  });
  REQUIRE(run_until(io, [&] { return rounds == 2; }));
  clients[0]->send(StacksWanted{9, kGatherStacks});
  REQUIRE(run_until(io, [&] { return end.has_value(); }));
  CHECK(end->missing == "node-1 (127.0.0.1)");
}

TEST_CASE("with a shared port, a peer that never spoke goes to the other protocol at the deadline, losing nothing") {
  // torch 1.13's TCPStore opens a connection for its watched keys and says nothing on it: dropped,
  // its worker spun on the closed socket, and the job's hang went unseen.
  asio::io_context io;
  auto o = options();
  o.admission->deadline = 300ms;
  o.liveness.interval = 100ms;
  std::optional<tcp::socket> taken;
  std::vector<uint8_t> first;
  o.shared_port = ServerOptions::SharedPort{[](const uint8_t*, size_t) { return std::optional<bool>(true); },
                                            [&](tcp::socket s, const tcp::endpoint&, std::vector<uint8_t> bytes) {
                                              taken.emplace(std::move(s));
                                              first = std::move(bytes);
                                            },
                                            8, 4, [](const asio::ip::address& peer) { return peer.to_string() == "127.0.0.1"; }};
  Server server(io, o);
  auto socks = stalled(io, server.port(), 1);
  REQUIRE(run_until(io, [&] { return taken.has_value(); }));
  CHECK(first.empty());
  CHECK(server.stats().unauthenticated == 0);
  // what the peer says now reaches the protocol that took it
  asio::write(socks[0], asio::buffer(std::string("watch")));
  std::string got(5, '\0');
  asio::read(*taken, asio::buffer(got));
  CHECK(got == "watch");
  // a silent one from an address the other protocol has no client from is dropped as ever
  taken.reset();
  auto stranger = stalled(io, server.port(), 1, {"127.0.0.2"});
  REQUIRE(run_until(io, [&] { return server.stats().unauthenticated == 1; }));
  REQUIRE(run_until(io, [&] { return server.stats().unauthenticated == 0; }));
  CHECK_FALSE(taken.has_value());
}

TEST_CASE("every node's figures: a node that does not answer is named as missing after the figures' shorter time") {
  asio::io_context io;
  auto o = options();
  o.stacks_timeout = 60s;  // a stack reading may take long; figures come at once or not at all
  o.ranks_timeout = 300ms;
  Server server(io, o);
  int rounds = 0;
  std::optional<StacksEnd> end;
  std::vector<std::string> parts;
  std::vector<std::unique_ptr<Client>> clients;
  clients = two_nodes(io, server, rounds, [&](int rank, Client::Callbacks& cb) {
    if (rank == 0) {
      cb.on_stacks_ask = [&](const StacksAsk& a) { clients[0]->send(StacksPart{a.id, "node-0's figures"}); };
      cb.on_stacks_part = [&](const StacksPart& p) { parts.push_back(p.part); };
    }
    cb.on_stacks_end = [&](const StacksEnd& e) { end = e; };
  });
  REQUIRE(run_until(io, [&] { return rounds == 2; }));
  clients[0]->send(StacksWanted{5, kGatherRanks});
  REQUIRE(run_until(io, [&] { return end.has_value(); }, 5s));
  CHECK(parts == std::vector<std::string>{"node-0's figures"});
  CHECK(end->missing == "node-1 (127.0.0.1)");
}
