#include "watch/job_ask.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/posix.h"

namespace dtl::watch {

Result<LiveJob> find_job(const std::optional<pid_t>& pid) {
  auto jobs = live_jobs();
  if (pid) std::erase_if(jobs, [&](const LiveJob& j) { return j.pid != *pid; });
  if (jobs.empty()) {
    return fail(pid ? "no dtlaunch job of yours with pid " + std::to_string(*pid) + " on this machine"
                    : "no dtlaunch job of yours runs on this machine",
                1);
  }
  if (jobs.size() > 1) {
    std::string pids;
    for (const auto& j : jobs) pids += " " + std::to_string(j.pid);
    return fail(std::to_string(jobs.size()) + " dtlaunch jobs of yours run here: name one by its pid (" +
                pids.substr(1) + ")");
  }
  return jobs.front();
}

Result<std::string> ask_job(const LiveJob& job, const std::string& ask, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, job.socket.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return fail("cannot reach the job of pid " + std::to_string(job.pid) + ": " + std::strerror(error), 1);
  }
  timeval limit{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  const bool asked = posix::write_all(fd, ask + "\n");
  ::shutdown(fd, SHUT_WR);
  auto got = asked ? posix::read_all(fd, 64 << 20) : posix::ReadAll{};
  ::close(fd);
  if (got.text.empty()) {
    return fail("the job of pid " + std::to_string(job.pid) +
                    (got.error == EAGAIN || got.error == EWOULDBLOCK
                         ? " did not answer within " + std::to_string(timeout.count() / 1000) + " s"
                         : " did not answer"),
                1);
  }
  return got.text;
}

}  // namespace dtl::watch
