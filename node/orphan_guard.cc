#include "node/orphan_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "base/posix.h"
#include "node/proc_stat.h"

namespace dtl::node {
namespace {

constexpr auto kCgroupEmptyWait = std::chrono::seconds(2);
/// Each pass kills what it finds; a process not yet killed may fork meanwhile, so pass again.
constexpr int kSessionPasses = 50;

/// SIGKILLs every process whose session is one of `sessions`; how many it found.
int kill_sessions(const std::set<pid_t>& sessions) {
  int found = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    const char* end = e->d_name + std::strlen(e->d_name);
    if (std::from_chars(e->d_name, end, pid).ptr != end || pid <= 0) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[1024];
    long n = posix::read_some(fd, buf, sizeof buf);
    ::close(fd);
    if (n <= 0) continue;
    auto sid = stat_session(std::string_view(buf, static_cast<size_t>(n)));
    if (sid && sessions.count(*sid) && ::kill(pid, SIGKILL) == 0) ++found;
  }
  closedir(proc);
  return found;
}

[[noreturn]] void guard_main(int fd, const std::string& cgroup) {
  // Out of dtlaunch's process group and session: what is sent to them does not reach the guard.
  setsid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2}) signal(sig, SIG_IGN);
  // Hold nothing of dtlaunch's: pipes held open here would delay EOF for the workers' readers.
  // (close_range is Linux 5.9+; before, each descriptor up to the limit.)
  const auto close_from_to = [](unsigned first, unsigned last) {
    if (first > last || close_range(first, last, 0) == 0) return;
    rlimit files{};
    const rlim_t top = getrlimit(RLIMIT_NOFILE, &files) == 0 ? std::min<rlim_t>(files.rlim_cur, 1 << 16) : 1024;
    for (rlim_t f = first; f <= last && f < top; ++f) close(static_cast<int>(f));
  };
  close_from_to(0, 1);
  if (fd > 3) close_from_to(3, static_cast<unsigned>(fd) - 1);
  close_from_to(static_cast<unsigned>(fd) + 1, ~0u);
  std::set<pid_t> workers;
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
      if (pending[0] == '+') workers.insert(pgid);
      if (pending[0] == '-') workers.erase(pgid);
      if (pending[0] == 'd') dir = pending.substr(1, nl - 1);
      pending.erase(0, nl + 1);
    }
  }
  // After a normal exit dtlaunch has forgotten every worker, and the cgroup is empty.
  bool cgroup_gone = !cgroup.empty() && remove_cgroup(cgroup, kCgroupEmptyWait);
  for (pid_t pgid : workers) kill(-pgid, SIGKILL);
  if (!cgroup_gone && !workers.empty()) {
    for (int pass = 0; pass < kSessionPasses && kill_sessions(workers) > 0; ++pass) {
    }
  }
  if (!dir.empty()) {  // after a normal exit dtlaunch removed it already, or said to keep it
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  _exit(0);
}

}  // namespace

std::optional<pid_t> stat_session(std::string_view stat) {
  const auto parsed = parse_proc_stat(stat);
  if (!parsed) return std::nullopt;
  return parsed->session;
}

OrphanGuard::OrphanGuard(bool use_cgroup) {
  if (use_cgroup) cgroup_ = JobCgroup::create(cgroup_note_);
  const std::string cgroup_path = cgroup_ ? cgroup_->path() : "";
  const auto give_up = [&](const char* what) {
    const int err = errno;
    if (cgroup_) remove_cgroup(cgroup_->path(), std::chrono::milliseconds(0));
    throw std::system_error(err, std::generic_category(), what);
  };
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) give_up("pipe");
  pid_ = fork();
  if (pid_ < 0) {
    close(fds[0]);
    close(fds[1]);
    give_up("fork");
  }
  if (pid_ == 0) {
    close(fds[1]);
    guard_main(fds[0], cgroup_path);
  }
  close(fds[0]);
  fd_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  close(fd_);
  posix::retry_eintr([&] { return waitpid(pid_, nullptr, 0); });
  if (cgroup_) remove_cgroup(cgroup_->path(), kCgroupEmptyWait);  // the guard did, unless it died
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

void OrphanGuard::watch(pid_t worker) { send('+', worker); }
void OrphanGuard::forget(pid_t worker) { send('-', worker); }

}  // namespace dtl::node
