// For the accept back-off tests: a process out of file descriptors, for a while.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace dtl::test {

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
