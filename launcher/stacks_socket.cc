#include "launcher/stacks_socket.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "base/error.h"
#include "base/posix.h"

namespace dtl::launcher {

std::string stacks_dir(bool create) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir =
      runtime && *runtime ? std::string(runtime) + "/dtlaunch" : "/tmp/dtlaunch-" + std::to_string(getuid());
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "";
  struct stat st {};
  // Another user's folder of that name (in /tmp anyone may make one) is never used.
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) return "";
  return dir;
}

std::vector<LiveJob> live_jobs() {
  std::vector<LiveJob> jobs;
  const std::string dir = stacks_dir(false);
  if (dir.empty()) return jobs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".sock")) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::filesystem::remove(entry.path(), ec);  // a SIGKILLed dtlaunch's
      continue;
    }
    jobs.push_back({pid, entry.path().string()});
  }
  return jobs;
}

int print_stacks(const std::optional<pid_t>& pid) {
  auto jobs = live_jobs();
  if (pid) std::erase_if(jobs, [&](const LiveJob& j) { return j.pid != *pid; });
  if (jobs.empty()) {
    std::cerr << error_line(Error{pid ? "no dtlaunch job of yours with pid " + std::to_string(*pid) + " on this machine"
                                      : "no dtlaunch job of yours runs on this machine",
                                  1},
                            "dtlaunch stacks");
    return 1;
  }
  if (jobs.size() > 1) {
    std::string pids;
    for (const auto& j : jobs) pids += " " + std::to_string(j.pid);
    std::cerr << error_line(Error{std::to_string(jobs.size()) +
                                      " dtlaunch jobs of yours run here: name one by its pid (" + pids.substr(1) + ")",
                                  2},
                            "dtlaunch stacks");
    return 2;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, jobs[0].socket.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::cerr << error_line(
        Error{"cannot reach the job of pid " + std::to_string(jobs[0].pid) + ": " + std::strerror(errno), 1},
        "dtlaunch stacks");
    if (fd >= 0) ::close(fd);
    return 1;
  }
  auto got = posix::read_all(fd, 64 << 20);
  ::close(fd);
  if (got.text.empty()) {
    std::cerr << error_line(Error{"the job of pid " + std::to_string(jobs[0].pid) + " did not answer", 1},
                            "dtlaunch stacks");
    return 1;
  }
  std::cout << got.text << std::flush;
  return 0;
}

}  // namespace dtl::launcher
