#include "base/posix.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

extern char** environ;

namespace dtl::posix {
namespace {

/// Splits what a program printed into lines; a last line without '\n' counts too.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

/// Starts argv with stdout on `out_fd`, stdin and stderr on /dev/null, default signal handling.
pid_t spawn_with_stdout(const std::vector<std::string>& argv, int out_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, pipe_signal;
  sigemptyset(&none);
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);  // dtlaunch ignores it; the program should not inherit that
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &pipe_signal);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ) != 0) pid = -1;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace

long read_some(int fd, void* buf, size_t size) {
  return retry_eintr([&] { return ::read(fd, buf, size); });
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

ReadAll read_all(int fd, size_t limit) {
  ReadAll out;
  char buf[8192];
  while (true) {
    long n = read_some(fd, buf, sizeof buf);
    if (n < 0) {
      out.error = errno;
      break;
    }
    if (n == 0) break;
    const size_t room = limit - out.text.size();
    out.text.append(buf, std::min(room, static_cast<size_t>(n)));
    if (static_cast<size_t>(n) > room) {
      out.too_large = true;
      break;
    }
  }
  return out;
}

std::string read_small_file(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  auto r = read_all(fd, limit);
  ::close(fd);
  return r.text;
}

ProgramOutput run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          PollFunction poll) {
  ProgramOutput result;
  int fds[2];
  if (argv.empty() || pipe2(fds, O_CLOEXEC) != 0) return result;
  const pid_t pid = spawn_with_stdout(argv, fds[1]);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return result;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::string text;
  bool in_time = true;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fds[0], POLLIN, 0};
    // A poll error other than EINTR ends the wait as a timeout does: a read now could block past the deadline.
    if (left.count() <= 0 || retry_eintr([&] { return poll(&p, 1, static_cast<int>(left.count())); }) <= 0) {
      in_time = false;
      break;
    }
    char buf[4096];
    long n = read_some(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (!in_time) ::kill(pid, SIGKILL);
  int status = 0;
  if (retry_eintr([&] { return ::waitpid(pid, &status, 0); }) == pid && in_time && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.lines = split_lines(text);
  return result;
}

Library::Library(const char* name) : handle_(dlopen(name, RTLD_NOW | RTLD_LOCAL)) {}

Library::~Library() {
  if (handle_) dlclose(handle_);
}

void* Library::find(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return online_cpu_count();
}

int online_cpu_count() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string host_name() {
  char name[256] = "localhost";
  gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::string> host_addresses() {
  std::vector<std::string> out;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return out;
  for (const ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET6_ADDRSTRLEN] = "";
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto& a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_LOOPBACK(&a)) continue;
      inet_ntop(AF_INET6, &a, text, sizeof text);
    } else {
      continue;
    }
    out.emplace_back(text);
  }
  freeifaddrs(all);
  return out;
}

std::string interface_of(const std::string& address) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (const ifaddrs* i = all; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || !i->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = "";
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, text, sizeof text);
    }
    if (address == text) found = i->ifa_name;
  }
  freeifaddrs(all);
  return found;
}

std::string current_directory() {
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  return ec ? "." : cwd.string();
}

namespace {
// The soft limit before raise_fd_limit raised it, for the children: process state, as the limit is.
rlimit original_fd_limit{};
bool fd_limit_raised = false;
}  // namespace

uint64_t fd_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return uint64_t{1} << 20;
  return files.rlim_cur;
}

uint64_t raise_fd_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 1024;
  if (files.rlim_cur < files.rlim_max) {
    rlimit raised = files;
    raised.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      if (!fd_limit_raised) original_fd_limit = files;
      fd_limit_raised = true;
      files = raised;
    }
  }
  return files.rlim_cur == RLIM_INFINITY ? UINT64_MAX : files.rlim_cur;
}

void restore_fd_limit_in_child() {
  if (fd_limit_raised) setrlimit(RLIMIT_NOFILE, &original_fd_limit);
}

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

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

std::optional<std::string> file_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  switch (st.st_mode & S_IFMT) {
    case S_IFDIR: return "a folder";
    case S_IFREG: return "a regular file";
    case S_IFIFO: return "a FIFO";
    case S_IFLNK: return "a symbolic link";
    case S_IFSOCK: return "a socket";
    default: return "a device";
  }
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

}  // namespace dtl::posix
