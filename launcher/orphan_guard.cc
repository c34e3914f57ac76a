#include "launcher/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <set>
#include <system_error>

#include "base/posix.h"

namespace dtl::launcher {
namespace {

[[noreturn]] void guard_main(int fd) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2}) signal(sig, SIG_IGN);
  // Hold nothing of dtlaunch's: pipes held open here would delay EOF for the workers' readers.
  close_range(0, 1, 0);
  if (fd > 3) close_range(3, static_cast<unsigned>(fd) - 1, 0);
  close_range(static_cast<unsigned>(fd) + 1, ~0u, 0);
  std::set<pid_t> groups;
  std::string dir;
  char buf[4096];
  std::string pending;
  while (true) {
    long n = posix::read_some(fd, buf, sizeof buf);
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      pid_t pgid = static_cast<pid_t>(std::atol(pending.c_str() + 1));
      if (pending[0] == '+') groups.insert(pgid);
      if (pending[0] == '-') groups.erase(pgid);
      if (pending[0] == 'd') dir = pending.substr(1, nl - 1);
      pending.erase(0, nl + 1);
    }
  }
  for (pid_t pgid : groups) kill(-pgid, SIGKILL);
  if (!dir.empty()) {  // after a normal exit dtlaunch removed it already, or said to keep it
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  _exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  pid_ = fork();
  if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid_ == 0) {
    close(fds[1]);
    guard_main(fds[0]);
  }
  close(fds[0]);
  fd_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  close(fd_);
  posix::retry_eintr([&] { return waitpid(pid_, nullptr, 0); });
}

void OrphanGuard::send(char op, pid_t pgid) {
  char line[32];
  int n = std::snprintf(line, sizeof line, "%c%d\n", op, static_cast<int>(pgid));
  posix::write_all(fd_, std::string_view(line, static_cast<size_t>(n)));
}

void OrphanGuard::remove_on_death(const std::string& dir) {
  std::string line = "d" + dir + "\n";
  posix::write_all(fd_, line);
}

void OrphanGuard::watch(pid_t pgid) { send('+', pgid); }
void OrphanGuard::forget(pid_t pgid) { send('-', pgid); }

}  // namespace dtl::launcher
