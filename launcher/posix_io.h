// Two small POSIX needs shared by the supervisors: writing a whole buffer to a descriptor, and the
// name this machine goes by in failure summaries.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

namespace dtl::launcher {

/// Writes all of `data`, waiting when `fd` is non-blocking. False once the reader is gone.
inline bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

inline std::string host_name() {
  char name[256] = "localhost";
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace dtl::launcher
