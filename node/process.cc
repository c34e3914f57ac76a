#include "node/process.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/posix.h"

namespace dtl::node {

namespace {

constexpr int kMaxLook = 64;  ///< processes looked at below a rank

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

/// "python", "python3", "python3.11", "python3.11d": an interpreter's own name.
bool python_name(const std::string& name) {
  if (!name.starts_with("python")) return false;
  return std::all_of(name.begin() + 6, name.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'd' || c == 'm' || c == 'u';
  });
}

/// Programs that run another and wait for it: a rank's work is in their one child.
bool wrapper_name(const std::string& name) {
  static const std::array kWrappers = {"sh",     "bash",    "dash",    "zsh",    "ksh",   "env",  "timeout", "nice",
                                       "ionice", "numactl", "taskset", "stdbuf", "nohup", "chrt", "setsid",  "time"};
  return std::find(kWrappers.begin(), kWrappers.end(), name) != kWrappers.end();
}

std::string exe_of(pid_t pid) {
  std::error_code ec;
  auto target = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return ec ? "" : target.string();
}

}  // namespace

ProcessKind process_kind_of(std::string_view maps, const std::string& exe) {
  ProcessKind kind;
  kind.python = python_name(base_name(exe));
  size_t start = 0;
  while (start < maps.size()) {
    size_t end = maps.find('\n', start);
    if (end == std::string_view::npos) end = maps.size();
    const std::string_view line = maps.substr(start, end - start);
    const auto slash = line.rfind('/');
    if (slash != std::string_view::npos) {
      const std::string_view file = line.substr(slash + 1);
      if (file.starts_with("libpython")) kind.python = true;
      if (file.starts_with("libcuda.so")) kind.cuda = true;
    }
    start = end + 1;
  }
  return kind;
}

ProcessKind process_kind(pid_t pid) {
  const std::string maps = posix::read_small_file("/proc/" + std::to_string(pid) + "/maps", 16 << 20);
  return process_kind_of(maps, exe_of(pid));
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(task, ec)) {
    std::istringstream children(posix::read_small_file(entry.path().string() + "/children"));
    for (pid_t child; children >> child;) out.push_back(child);
  }
  return out;
}

RankProcess rank_process(pid_t rank_pid) {
  const ProcessKind own = process_kind(rank_pid);
  if (own.python) return {rank_pid, own};
  // A wrapper that did not exec: the first Python process below it, breadth first.
  std::deque<pid_t> queue{rank_pid};
  for (int looked = 0; !queue.empty() && looked < kMaxLook; ++looked) {
    const pid_t pid = queue.front();
    queue.pop_front();
    if (pid != rank_pid) {
      if (const auto kind = process_kind(pid); kind.python) return {pid, kind};
    }
    for (pid_t child : children_of(pid)) queue.push_back(child);
  }
  // Native code: through wrappers that run one program.
  RankProcess r{rank_pid, own};
  for (int depth = 0; depth < 8 && wrapper_name(base_name(exe_of(r.pid))); ++depth) {
    const auto children = children_of(r.pid);
    if (children.size() != 1) break;
    r = {children.front(), process_kind(children.front())};
  }
  return r;
}

}  // namespace dtl::node
