// The store's server on loopback, in this process: connection caps, the accept() pause when out of
// descriptors, and how unsent replies are counted. Clients are raw sockets; a client that must read
// runs in a thread of its own while the server's io_context runs here.
#include "store/server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using namespace dtl::store;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

using dtl::test::run_until;
using dtl::test::stalled;

namespace {

std::string validate() {
  std::string s(1, '\0');
  put_u32(s, kValidationMagic);
  return s;
}

/// A 2.x client's SET then GET of `key`: the GET's reply is what the server sends back.
std::string set_then_get(const std::string& key, const std::string& value) {
  std::string s = validate();
  s += '\1';  // SET
  put_bytes(s, key);
  put_bytes(s, value);
  s += '\3';  // GET
  put_bytes(s, key);
  return s;
}

/// Connects, sends `request`, and reads `want` bytes back; how many it got before the end.
size_t exchange(int port, const std::string& request, size_t want) {
  asio::io_context io;
  tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  if (ec) return 0;
  asio::write(s, asio::buffer(request), ec);
  std::string got(want, '\0');
  return asio::read(s, asio::buffer(got), ec);
}

}  // namespace

TEST_CASE("store server: connections past the caps, per address and in all, are closed at once") {
  asio::io_context io;
  ServerOptions o;
  o.max_connections = 4;
  o.max_per_address = 2;
  Server server(io, o);
  server.serve(listen_on(io, "127.0.0.1", 0));
  auto one = stalled(io, server.port(), 3, {"127.0.0.1"});
  REQUIRE(run_until(io, [&] { return server.stats().refused == 1; }));
  CHECK(server.connections() == 2);
  auto other = stalled(io, server.port(), 3, {"127.0.0.2"});
  REQUIRE(run_until(io, [&] { return server.stats().refused == 2; }));
  CHECK(server.connections() == 4);
  auto third = stalled(io, server.port(), 1, {"127.0.0.3"});  // the total is reached
  REQUIRE(run_until(io, [&] { return server.stats().refused == 3; }));
  CHECK(server.connections() == 4);
  // One leaves: its address may connect again.
  one[0].close();
  REQUIRE(run_until(io, [&] { return server.connections() == 3; }));
  auto again = stalled(io, server.port(), 1, {"127.0.0.1"});
  REQUIRE(run_until(io, [&] { return server.connections() == 4; }));
  CHECK(server.stats().refused == 3);
}

TEST_CASE("store server: the listening socket is not inherited by the workers") {
  asio::io_context io;
  auto acceptor = listen_on(io, "127.0.0.1", 0);
  CHECK((::fcntl(acceptor.native_handle(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("store server: a GET of a value of max_value bytes is answered, however small max_unsent") {
  asio::io_context io;
  ServerOptions o;
  o.limits.max_value = 1 << 20;
  o.max_unsent = 1024;
  Server server(io, o);
  server.serve(listen_on(io, "127.0.0.1", 0));
  std::atomic<size_t> got{0};
  std::atomic<bool> done{false};
  std::thread client([&] {
    got = exchange(server.port(), set_then_get("k", std::string(1 << 20, 'v')), 8 + (1 << 20));
    done = true;
  });
  run_until(io, [&] { return done.load(); }, 10000ms);
  client.join();
  CHECK(got == 8 + (1 << 20));
}

TEST_CASE("store server: replies unsent to all clients together are bounded") {
  asio::io_context io;
  ServerOptions o;
  o.max_unsent_total = 1000;
  Server server(io, o);
  server.serve(listen_on(io, "127.0.0.1", 0));
  std::atomic<size_t> got{1};
  std::atomic<bool> done{false};
  std::thread client([&] {
    got = exchange(server.port(), set_then_get("k", std::string(2000, 'v')), 8 + 2000);
    done = true;
  });
  run_until(io, [&] { return done.load(); }, 10000ms);
  client.join();
  CHECK(got == 0);  // dropped instead of answered
  CHECK(server.connections() == 0);
}

TEST_CASE("store server: out of file descriptors, accept() is tried again after a pause, not at once") {
  asio::io_context io;
  ServerOptions o;
  o.accept_backoff = 100ms;
  Server server(io, o);
  server.serve(listen_on(io, "127.0.0.1", 0));
  auto socks = stalled(io, server.port(), 3);  // in the listen backlog: the loop has not run
  const long ms = dtl::test::run_out_of_descriptors(io, 500ms);
  const auto failures = server.stats().accept_failures;
  CHECK(failures >= 1);
  CHECK(failures <= static_cast<size_t>(ms / 100 + 2));  // spinning makes tens of thousands a second
  CHECK(server.connections() == 0);
  CHECK(run_until(io, [&] { return server.connections() == 3; }));
}

TEST_CASE("store server: serve() after close() takes no client, also once the server is gone") {
  // The accept loop calls into the server's state through a raw pointer until close() stops it;
  // a loop started after close() was never stopped (close() returns at once the second time).
  asio::io_context io;
  std::vector<tcp::socket> clients;
  auto knock = [&](int port) {
    tcp::socket s(io);
    boost::system::error_code ec;
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
    clients.push_back(std::move(s));
  };
  auto closed_then_served = [&](Server& server) {
    server.close();
    auto acceptor = listen_on(io, "127.0.0.1", 0);
    const int port = acceptor.local_endpoint().port();
    server.serve(std::move(acceptor));
    return port;
  };
  {
    Server server(io);
    knock(closed_then_served(server));
    run_until(io, [&] { return server.connections() > 0; }, 200ms);
    CHECK(server.connections() == 0);
  }
  int port = 0;
  {
    Server server(io);
    port = closed_then_served(server);
  }
  knock(port);  // the server is gone: nothing may touch what it held (ASan: heap-use-after-free)
  io.run_for(200ms);
}

TEST_CASE("store server: a watched key's value reaches the watch, under any prefix, after the store has it") {
  asio::io_context io;
  Server server(io);
  server.serve(listen_on(io, "127.0.0.1", 0));
  std::vector<std::string> seen;
  server.watch("exception_dump", [&](const std::string& value) {
    seen.push_back(value);
    CHECK(server.state().keys() >= 1);  // set already
  });
  std::atomic<int> done{0};
  std::thread client([&] {
    // torch's TCPStore puts "/" before every key, a PrefixStore more; other keys are not watched
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"/exception_dump", std::string("\x01\0\0\0", 4)},
             {"/worker/attempt_0/exception_dump", "3"},
             {"/not_exception_dump", "x"},
             {"/exception_dump/x", "y"}}) {
      exchange(server.port(), set_then_get(key, value), 4 + value.size());
    }
    done = 1;
  });
  run_until(io, [&] { return done.load() == 1; }, 10000ms);
  client.join();
  CHECK(seen == std::vector<std::string>{std::string("\x01\0\0\0", 4), "3"});
}
