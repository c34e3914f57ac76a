#include "node/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "base/posix.h"

namespace dtl::node {
namespace {


/// The kernel's struct clone_args up to `cgroup` (CLONE_ARGS_SIZE_VER2).
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;  // Linux 5.7+

constexpr uint64_t kClonePidfd = 0x1000;            // Linux 5.2+

/// fork(), starting the child in the cgroup `cgroup_fd` where one is given (clone3's
/// CLONE_INTO_CGROUP): moving a running process there instead waits for an RCU grace period, about
/// 17 ms per worker. `placed` says whether it worked (a seccomp filter may refuse clone3). `pidfd`,
/// where given, gets a pidfd of the child, or -1 where none could be had.
pid_t fork_into(int cgroup_fd, int* pidfd, bool& placed) {
  placed = false;
  int fd = -1;
  if (pidfd) *pidfd = -1;
  for (bool into_cgroup : {true, false}) {
    if (into_cgroup && cgroup_fd < 0) continue;
    if (!into_cgroup && !pidfd) break;
    CloneArgs args{};
    args.flags = (into_cgroup ? kCloneIntoCgroup : 0) | (pidfd ? kClonePidfd : 0);
    args.pidfd = pidfd ? reinterpret_cast<uint64_t>(&fd) : 0;
    args.exit_signal = SIGCHLD;
    args.cgroup = into_cgroup ? static_cast<uint64_t>(cgroup_fd) : 0;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) {
      placed = into_cgroup;
      if (pidfd && pid > 0) *pidfd = fd;
      return static_cast<pid_t>(pid);
    }
  }
  return fork();
}

/// `cpus` as the bit mask sched_setaffinity takes, sized to the highest CPU in it.
std::vector<unsigned long> affinity_mask(const std::vector<int>& cpus) {
  constexpr int kBits = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end()) / kBits + 1, 0);
  for (int cpu : cpus) mask[cpu / kBits] |= 1UL << (cpu % kBits);
  return mask;
}

/// Writes the parts to stderr, without allocating.
void write_stderr(std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    ssize_t ignored = write(2, p, strlen(p));
    (void)ignored;
  }
}

/// Only async-signal-safe calls from here on: this runs in the child between fork and exec, with
/// every signal blocked until the handlers inherited from dtlaunch are reset (a SIGTERM caught by
/// dtlaunch's handler in the child would reach dtlaunch's own event loop).
[[noreturn]] void exec_child(const SpawnSpec& spec, pid_t parent, bool in_cgroup, char* const* argv,
                             char* const* envp, const std::vector<unsigned long>& cpu_mask) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  // Yama's ptrace_scope 1 (Ubuntu's default) lets only a process's ancestors trace it; py-spy and
  // eu-stack, which read a hung worker's stack, are dtlaunch's children, the worker's siblings.
  // Naming dtlaunch the worker's ptracer lets them. Without Yama this fails and nothing is needed.
  prctl(PR_SET_PTRACER, parent, 0, 0, 0);
  if (!in_cgroup && spec.cgroup_procs_fd >= 0) {
    ssize_t ignored = write(spec.cgroup_procs_fd, "0", 1);  // where it fails, the guard's fallback
    (void)ignored;
  }
  setsid();
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
  // As torchrun's Popen(close_fds=True): nothing dtlaunch inherited reaches the workers. Before
  // Linux 5.11 close_range cannot mark, so each descriptor up to the (restored) limit is.
  if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    rlimit files{};
    const rlim_t top = getrlimit(RLIMIT_NOFILE, &files) == 0 ? std::min<rlim_t>(files.rlim_cur, 1 << 16) : 1024;
    for (int fd = 3; fd < static_cast<int>(top); ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  // all the worker's threads inherit it, as from torchrun's numactl
  if (!cpu_mask.empty() &&
      sched_setaffinity(0, cpu_mask.size() * sizeof(unsigned long), reinterpret_cast<const cpu_set_t*>(cpu_mask.data())) != 0) {
    write_stderr({"dtlaunch: cannot bind to the CPUs of --numa_binding: ", strerrordesc_np(errno), "\n"});
    _exit(127);
  }
  execve(spec.path.c_str(), argv, envp);
  const char* why = strerrordesc_np(errno);  // no locale, no allocation: this child may not take locks
  write_stderr({"dtlaunch: cannot execute ", spec.path.c_str(), ": ", why, "\n"});
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
  const auto cpu_mask = affinity_mask(spec.cpus);
  const pid_t parent = getpid();
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &previous);
  bool in_cgroup = false;
  pid_t pid = fork_into(spec.cgroup_fd, spec.pidfd, in_cgroup);
  if (pid == 0) exec_child(spec, parent, in_cgroup, argv.data(), envp.data(), cpu_mask);
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw std::system_error(fork_errno, std::generic_category(), "fork");
  return pid;
}

void signal_worker(pid_t worker, int sig) {
  if (::kill(-worker, sig) != 0 && errno == ESRCH) ::kill(worker, sig);
}

}  // namespace dtl::node
