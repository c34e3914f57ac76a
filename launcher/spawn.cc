#include "launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "base/posix.h"

namespace dtl::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

/// Only async-signal-safe calls from here on: this runs in the child between fork and exec, with
/// every signal blocked until the handlers inherited from dtlaunch are reset (a SIGTERM caught by
/// dtlaunch's handler in the child would reach dtlaunch's own event loop).
[[noreturn]] void exec_child(const SpawnSpec& spec, pid_t parent, char* const* argv, char* const* envp) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  posix::restore_fd_limit_in_child();  // dtlaunch's raised limit is its own, not the worker's
  const int fds[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    if (fds[target] < 0) continue;
    if (fds[target] == target) {
      fcntl(target, F_SETFD, 0);  // keep it across exec
    } else if (dup2(fds[target], target) < 0) {
      _exit(127);
    }
  }
  execve(spec.path.c_str(), argv, envp);
  const char* why = strerror(errno);
  const char* parts[] = {"dtlaunch: cannot execute ", spec.path.c_str(), ": ", why, "\n"};
  for (const char* p : parts) {
    ssize_t ignored = write(2, p, strlen(p));
    (void)ignored;
  }
  _exit(127);
}

}  // namespace

pid_t spawn_worker(const SpawnSpec& spec) {
  // Everything the child needs is laid out before fork: it must not allocate afterwards.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &previous);
  pid_t pid = fork();
  if (pid == 0) exec_child(spec, parent, argv.data(), envp.data());
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw std::system_error(fork_errno, std::generic_category(), "fork");
  // Also from the parent, so the group exists before anyone signals it (no race with the child).
  setpgid(pid, pid);
  return pid;
}

std::optional<std::string> find_executable(const std::string& name, const std::string& path_env) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::string::size_type start = 0;
  while (start <= path_env.size()) {
    auto end = path_env.find(':', start);
    if (end == std::string::npos) end = path_env.size();
    std::string dir = path_env.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

bool path_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace dtl::launcher
