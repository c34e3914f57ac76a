// The server's defences against peers that never prove the token, on loopback with raw sockets in
// this process: the io_context runs until what is checked happened, or a bounded time passed.
#include "rendezvous/server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
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
  std::vector<std::unique_ptr<Client>> clients;
  int rounds = 0;
  std::optional<Exit> exit;
  for (int rank : {0, 1}) {
    ClientOptions c;
    c.host = "127.0.0.1";
    c.port = server.port();
    c.credentials = {"job42", "s3cret"};
    c.join.host = "node-" + std::to_string(rank);
    c.join.node_rank = rank;
    c.join.min_nodes = c.join.max_nodes = 2;
    Client::Callbacks cb{[&](const Round&) { ++rounds; }, [](const Stop&) {},
                         [&](const Exit& e) { exit = e; }, [](const std::string& why, bool) { FAIL(why); }};
    clients.push_back(std::make_unique<Client>(io, c, cb));
    clients.back()->start();
  }
  REQUIRE(run_until(io, [&] { return rounds == 2; }));
  clients[1]->leave(Leaving{"it received SIGTERM"});
  REQUIRE(run_until(io, [&] { return exit.has_value(); }));
  CHECK(exit->code == 1);
  CHECK(exit->reason == "node-1 (127.0.0.1) left: it received SIGTERM");
  CHECK(exit->failures.empty());  // no failure of its own: the reason is the whole story
  CHECK(run_until(io, [&] { return server.connections() == 1; }));  // its hang-up followed
}
