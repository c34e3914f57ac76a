#include "watch/job_ask.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "base/posix.h"

namespace dtl::watch {
namespace {

/// Longer than the job holds a client (120 s): the job's own deadline comes first.
constexpr auto kStacksTimeout = std::chrono::seconds(130);

}  // namespace

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
  const int fd = connect_to_job(job.socket);
  if (fd < 0) return fail("cannot reach the job of pid " + std::to_string(job.pid) + ": " + std::strerror(errno), 1);
  timeval limit{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  // The connection stays open both ways until the answer: the job takes its end for the asker's
  // going away, and reads no stack for it.
  const bool asked = posix::write_all(fd, ask + "\n");
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

int print_stacks(const std::optional<pid_t>& pid) {
  constexpr const char* kWho = "dtlaunch stacks";
  auto job = find_job(pid);
  if (!job) {
    std::cerr << error_line(job.error(), kWho);
    return job.error().exit_code;
  }
  auto got = ask_job(*job, "stacks", kStacksTimeout);
  if (!got) {
    std::cerr << error_line(got.error(), kWho);
    return got.error().exit_code;
  }
  std::cout << *got << std::flush;
  return 0;
}

}  // namespace dtl::watch
