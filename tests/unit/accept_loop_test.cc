// The accept loop the rendezvous's and the store's ports share: connections waiting are taken in
// batches with other handlers between them, each close-on-exec and non-blocking with its peer's
// address; nothing is called after stop(). (Its pause when out of descriptors is tested through
// both servers: server_test.cc, store_server_test.cc.)
#include "base/accept_loop.h"

#include <fcntl.h>

#include <atomic>
#include <thread>

#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using dtl::net::AcceptLoop;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using dtl::test::run_until;
using dtl::test::stalled;

namespace {

tcp::acceptor listening(asio::io_context& io) {
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  a.listen(asio::socket_base::max_listen_connections);
  return a;
}

}  // namespace

TEST_CASE("accept loop: every waiting connection is taken, a batch at a time, close-on-exec, with its peer") {
  asio::io_context io;
  auto acceptor = listening(io);
  const int port = acceptor.local_endpoint().port();
  auto clients = stalled(io, port, 300, {"127.0.0.1", "127.0.0.2", "127.0.0.3"});  // all in the backlog
  std::vector<tcp::socket> taken;
  std::vector<tcp::endpoint> peers;
  size_t failures = 0;
  auto loop = AcceptLoop::start(std::move(acceptor), {.batch = 100},
                                {[&](tcp::socket s, const tcp::endpoint& peer) {
                                   taken.push_back(std::move(s));
                                   peers.push_back(peer);
                                 },
                                 [&](const boost::system::error_code&, bool) { ++failures; }});
  CHECK(taken.size() == 100);  // the first batch at once, the rest after what else is ready
  size_t when_other_ran = 0;
  asio::post(io, [&] { when_other_ran = taken.size(); });
  REQUIRE(run_until(io, [&] { return taken.size() == 300; }));
  CHECK(when_other_ran > 0);
  CHECK(when_other_ran < 300);
  CHECK(failures == 0);
  CHECK(loop->port() == port);
  for (size_t i = 0; i < taken.size(); ++i) {
    const int fd = taken[i].native_handle();
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK(peers[i] == taken[i].remote_endpoint());
    CHECK(peers[i] == clients[i].local_endpoint());  // in the order they connected
  }
  // Connections that come later wake it up again.
  auto later = stalled(io, port, 5);
  REQUIRE(run_until(io, [&] { return taken.size() == 305; }));
}

TEST_CASE("accept loop: after stop() nothing is called, and the port is still known") {
  asio::io_context io;
  auto acceptor = listening(io);
  const int port = acceptor.local_endpoint().port();
  size_t calls = 0;
  auto loop = AcceptLoop::start(std::move(acceptor), {},
                                {[&](tcp::socket, const tcp::endpoint&) { ++calls; },
                                 [&](const boost::system::error_code&, bool) { ++calls; }});
  loop->stop();
  CHECK(loop->port() == port);
  loop.reset();  // the pending wait holds it until its handler has run
  io.run_for(std::chrono::milliseconds(50));
  CHECK(calls == 0);
  boost::system::error_code ec;
  tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  CHECK(ec);  // nothing listens there any more
}

TEST_CASE("accept loop: clients that connect while it runs are all taken, none left in the backlog") {
  // Edge-triggered epoll: a connection that lands between accept4's EAGAIN and the next wait must
  // still wake the loop (Asio re-arms the descriptor with EPOLL_CTL_MOD when the wait starts).
  asio::io_context io;
  auto acceptor = listening(io);
  const int port = acceptor.local_endpoint().port();
  size_t taken = 0;
  std::vector<tcp::socket> keep;
  auto loop = AcceptLoop::start(std::move(acceptor), {.batch = 3},
                                {[&](tcp::socket s, const tcp::endpoint&) { ++taken; keep.push_back(std::move(s)); },
                                 [&](const boost::system::error_code&, bool) {}});
  constexpr int kThreads = 4, kEach = 100;  // 800 descriptors: under a soft limit of 1024
  std::vector<std::thread> threads;
  std::atomic<int> connected{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      asio::io_context mine;
      std::vector<tcp::socket> socks;
      for (int i = 0; i < kEach; ++i) {
        tcp::socket s(mine);
        s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
        socks.push_back(std::move(s));
        ++connected;
        if (i % 17 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      while (connected < kThreads * kEach) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    });
  }
  // Once every client is connected, no new edge comes: the last ones must be taken anyway.
  CHECK(run_until(io, [&] { return taken == size_t{kThreads * kEach}; }, std::chrono::milliseconds(3000)));
  CHECK(taken == size_t{kThreads * kEach});
  for (auto& t : threads) t.join();
}
