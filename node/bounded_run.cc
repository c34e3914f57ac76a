#include "node/bounded_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>

#include "base/posix.h"
#include "node/spawn.h"

extern char** environ;

namespace dtl::node {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kErrorCap = 4096;
constexpr auto kAfterKill = std::chrono::seconds(1);

struct Fd {
  int fd = -1;
  ~Fd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

int ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

/// Exits reaped by someone else (the workers' waitpid(-1)), for the runs that wait for them.
struct Handed {
  std::mutex mutex;
  std::deque<std::pair<pid_t, int>> exits;
};
Handed& handed() {
  static Handed h;
  return h;
}

std::optional<int> take_handed(pid_t pid) {
  Handed& h = handed();
  std::lock_guard lock(h.mutex);
  for (auto it = h.exits.begin(); it != h.exits.end(); ++it) {
    if (it->first == pid) {
      const int status = it->second;
      h.exits.erase(it);
      return status;
    }
  }
  return std::nullopt;
}

/// The child's exit status once it ended, waiting until `until` at most (through its pidfd where
/// there is one); false when it still runs then. `cancel_fd` readable ends the wait early.
bool wait_until(pid_t pid, int pidfd, Clock::time_point until, int cancel_fd, int& status) {
  for (;;) {
    siginfo_t info{};
    const int r = posix::retry_eintr([&] { return ::waitid(P_PID, pid, &info, WEXITED | WNOHANG); });
    if (r == 0 && info.si_pid == pid) {
      status = info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0) : info.si_status;
      return true;
    }
    if (r != 0 && errno == ECHILD) {  // reaped by the workers' waitpid(-1): its status is handed here
      if (auto s = take_handed(pid)) {
        status = *s;
        return true;
      }
    }
    const int left = ms_until(until);
    if (left == 0) return false;
    pollfd fds[2] = {{pidfd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    // Where it has exited (its pidfd readable) or there is no pidfd, look again in 10 ms.
    if (r != 0 || pidfd < 0) fds[0].fd = -1;
    posix::retry_eintr([&] { return ::poll(fds, 2, fds[0].fd < 0 ? std::min(left, 10) : left); });
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN)) return false;
  }
}

}  // namespace

BoundedOutput run_bounded(const BoundedRun& run) {
  BoundedOutput out;
  if (run.argv.empty()) {
    out.error = "nothing to run";
    return out;
  }
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + strerrordesc_np(errno);
    return out;
  }
  Fd out_read{out_pipe[0]}, out_write{out_pipe[1]};
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + strerrordesc_np(errno);
    return out;
  }
  Fd err_read{err_pipe[0]}, err_write{err_pipe[1]};
  Fd devnull{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  Fd pidfd;
  SpawnSpec spec{run.argv[0],  run.argv,     env,           devnull.fd,
                 out_write.fd, err_write.fd, run.cgroup_fd, run.cgroup_procs_fd};
  spec.pidfd = &pidfd.fd;
  pid_t pid = -1;
  try {
    pid = spawn_worker(spec);
  } catch (const std::system_error& e) {
    out.error = e.what();
    return out;
  }
  out_write.close();
  err_write.close();
  devnull.close();

  const auto deadline = Clock::now() + run.timeout;
  std::optional<BoundedOutput::End> cut;  // why the run ends early
  char buf[65536];
  while (out_read.fd >= 0 || err_read.fd >= 0) {
    pollfd fds[3] = {{out_read.fd, POLLIN, 0}, {err_read.fd, POLLIN, 0}, {run.cancel_fd, POLLIN, 0}};
    const int left = ms_until(deadline);
    if (left == 0 || posix::retry_eintr([&] { return ::poll(fds, 3, left); }) == 0) {
      cut = BoundedOutput::End::timed_out;
      break;
    }
    if (run.cancel_fd >= 0 && (fds[2].revents & POLLIN)) {
      cut = BoundedOutput::End::cancelled;
      break;
    }
    if (fds[0].revents) {
      const long n = posix::read_some(out_read.fd, buf, sizeof buf);
      if (n <= 0) {
        out_read.close();
      } else if (out.output.size() + static_cast<size_t>(n) > run.output_cap) {
        cut = BoundedOutput::End::too_much;
        break;
      } else {
        out.output.append(buf, static_cast<size_t>(n));
      }
    }
    if (fds[1].revents) {
      const long n = posix::read_some(err_read.fd, buf, sizeof buf);
      if (n <= 0) {
        err_read.close();
      } else if (out.error.size() < kErrorCap) {
        out.error.append(buf, std::min(static_cast<size_t>(n), kErrorCap - out.error.size()));
      }
    }
  }
  int status = 0;
  bool ended = !cut && wait_until(pid, pidfd.fd, deadline, run.cancel_fd, status);
  if (!ended) {
    if (!cut) cut = ms_until(deadline) == 0 ? BoundedOutput::End::timed_out : BoundedOutput::End::cancelled;
    signal_worker(pid, SIGKILL);  // its whole process group: whatever it started goes too
    // One in uninterruptible sleep outlives SIGKILL: it is left, a zombie of dtlaunch's at worst.
    wait_until(pid, pidfd.fd, Clock::now() + kAfterKill, -1, status);
  }
  if (const auto nl = out.error.find('\n'); nl != std::string::npos) out.error.resize(nl);
  if (cut) {
    out.end = *cut;
  } else if (WIFEXITED(status)) {
    out.end = BoundedOutput::End::exited;
    out.code = WEXITSTATUS(status);
  } else {
    out.end = BoundedOutput::End::signalled;
    out.code = WTERMSIG(status);
  }
  return out;
}

void handed_exit(pid_t pid, int status) {
  Handed& h = handed();
  std::lock_guard lock(h.mutex);
  h.exits.emplace_back(pid, status);
  if (h.exits.size() > 256) h.exits.pop_front();
}

std::string describe(const BoundedOutput& out, const std::string& tool, std::chrono::milliseconds timeout) {
  const auto why = out.error.empty() ? std::string() : ": " + out.error;
  switch (out.end) {
    case BoundedOutput::End::exited:
      return tool + " exited " + std::to_string(out.code) + why;
    case BoundedOutput::End::signalled:
      return tool + " died of " + posix::signal_name(out.code) + why;
    case BoundedOutput::End::timed_out:
      return tool + " did not finish within " + std::to_string(timeout.count() / 1000) + " s";
    case BoundedOutput::End::too_much:
      return tool + " printed more than a stack's worth: cut off";
    case BoundedOutput::End::cancelled:
      return tool + " was stopped: the job ended";
    case BoundedOutput::End::not_started:
      return tool + " could not start" + why;
  }
  return tool + " failed";
}

}  // namespace dtl::node
