// For the socket servers' tests (rendezvous, store): peers that stall, a loop run until something
// holds, and a process out of file descriptors for a while.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace dtl::test {

/// Connections to 127.0.0.1:`port` that never send a byte, from the given source addresses in turn.
inline std::vector<boost::asio::ip::tcp::socket> stalled(boost::asio::io_context& io, int port, int n,
                                                         std::vector<std::string> sources = {"127.0.0.1"}) {
  namespace ip = boost::asio::ip;
  std::vector<ip::tcp::socket> out;
  for (int i = 0; i < n; ++i) {
    ip::tcp::socket s(io);
    s.open(ip::tcp::v4());
    s.bind({ip::make_address(sources[i % sources.size()]), 0});
    s.connect({ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    out.push_back(std::move(s));
  }
  return out;
}

/// Runs `io` until `done()` holds, for at most `limit`; whether it held.
template <class Done>
bool run_until(boost::asio::io_context& io, Done done,
               std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(10));
  return done();
}

/// Runs `io` for `how_long` with the soft descriptor limit at 64 and every descriptor under it
/// taken, then gives them back and restores the limit. Returns the milliseconds it ran.
inline long run_out_of_descriptors(boost::asio::io_context& io, std::chrono::milliseconds how_long) {
  rlimit before{};
  if (getrlimit(RLIMIT_NOFILE, &before) != 0) throw std::runtime_error("getrlimit");
  rlimit low = before;
  low.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) throw std::runtime_error("setrlimit");
  std::vector<int> fillers;
  for (int fd; (fd = dup(0)) >= 0;) fillers.push_back(fd);
  const auto started = std::chrono::steady_clock::now();
  io.run_for(how_long);
  const auto ran = std::chrono::steady_clock::now() - started;
  for (int fd : fillers) close(fd);
  if (setrlimit(RLIMIT_NOFILE, &before) != 0) throw std::runtime_error("setrlimit");
  return std::chrono::duration_cast<std::chrono::milliseconds>(ran).count();
}

}  // namespace dtl::test
