#include "node/memcg.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "base/posix.h"

namespace dtl::node {

namespace {

/// Limits this high mean none: v1 writes PAGE_COUNTER_MAX, about 2^63.
constexpr uint64_t kNoLimit = uint64_t{1} << 62;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(sep, start), s.size());
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string_view> lines_of(std::string_view s) {
  auto lines = split(s, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

struct Mount {
  std::string root, point;
};

/// The mount of the cgroup file system `fstype` whose super options hold `option` ("" for any).
std::optional<Mount> cgroup_mount(std::string_view mountinfo, std::string_view fstype, std::string_view option) {
  for (auto line : lines_of(mountinfo)) {
    const auto dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const auto before = split(line.substr(0, dash), ' ');
    const auto after = split(line.substr(dash + 3), ' ');
    if (before.size() < 5 || after.size() < 3 || after[0] != fstype) continue;
    if (!option.empty()) {
      const auto options = split(after[2], ',');
      if (std::find(options.begin(), options.end(), option) == options.end()) continue;
    }
    return Mount{std::string(before[3]), std::string(before[4])};
  }
  return std::nullopt;
}

std::string join(const Mount& m, std::string_view path) {
  // Paths in /proc/PID/cgroup are from the cgroup namespace's root, which is the mount's root.
  if (m.root != "/" && path.starts_with(m.root)) path.remove_prefix(m.root.size());
  std::string dir = m.point;
  if (!path.empty() && path != "/") dir += std::string(path.front() == '/' ? "" : "/") + std::string(path);
  return dir;
}

/// "key N" from a file of such lines.
std::optional<uint64_t> keyed_value(const std::string& text, std::string_view key) {
  for (auto line : lines_of(text)) {
    const auto words = split(line, ' ');
    if (words.size() == 2 && words[0] == key) {
      try {
        return std::stoull(std::string(words[1]));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> limit_in(const std::string& dir, bool v2) {
  std::string text = posix::read_small_file(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text == "max") return std::nullopt;
  try {
    const uint64_t bytes = std::stoull(text);
    return bytes >= kNoLimit ? std::nullopt : std::optional<uint64_t>(bytes);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

uint64_t machine_memory() {
  // "MemTotal:       24541220 kB"
  std::istringstream in(posix::read_small_file("/proc/meminfo"));
  for (std::string key, unit; in >> key;) {
    uint64_t value = 0;
    if (!(in >> value >> unit)) break;
    if (key == "MemTotal:") return value * 1024;
  }
  return 0;
}

}  // namespace

MemoryCgroup memory_cgroup_of(std::string_view proc_cgroup, std::string_view mountinfo, const std::string& sys_root) {
  std::optional<std::string_view> v1_path, v2_path;
  for (auto line : lines_of(proc_cgroup)) {
    const auto fields = split(line, ':');
    if (fields.size() < 3) continue;
    const auto path = line.substr(fields[0].size() + fields[1].size() + 2);
    const auto controllers = split(fields[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) v1_path = path;
    if (fields[0] == "0" && fields[1].empty()) v2_path = path;
  }
  if (v1_path) {
    if (auto m = cgroup_mount(mountinfo, "cgroup", "memory")) return {sys_root + join(*m, *v1_path), false};
  }
  if (v2_path) {
    if (auto m = cgroup_mount(mountinfo, "cgroup2", "")) {
      MemoryCgroup cg{sys_root + join(*m, *v2_path), true};
      // the v2 hierarchy counts memory only where the controller is on
      if (posix::read_small_file(cg.dir + "/memory.events").empty()) return {};
      return cg;
    }
  }
  return {};
}

MemoryCgroup memory_cgroup(pid_t pid) {
  return memory_cgroup_of(posix::read_small_file("/proc/" + std::to_string(pid) + "/cgroup"),
                          posix::read_small_file("/proc/self/mountinfo"));
}

std::optional<uint64_t> oom_kills(const MemoryCgroup& cg) {
  if (cg.dir.empty()) return std::nullopt;
  return keyed_value(posix::read_small_file(cg.dir + (cg.v2 ? "/memory.events" : "/memory.oom_control")), "oom_kill");
}

MemoryLimit memory_limit(const MemoryCgroup& cg) {
  MemoryLimit lowest{machine_memory(), ""};
  // Up to the hierarchy's root, which has no limit file (v2) or no limit (v1).
  for (std::string dir = cg.dir; !dir.empty() && dir != "/"; dir = dir.substr(0, dir.rfind('/'))) {
    if (auto bytes = limit_in(dir, cg.v2); bytes && *bytes < lowest.bytes) lowest = {*bytes, dir};
    if (dir.find('/') == std::string::npos) break;
  }
  return lowest;
}

bool log_says_oom_killed(std::string_view log, pid_t pid) {
  const std::string killed = "Killed process " + std::to_string(pid) + " ";
  const std::string field = ",pid=" + std::to_string(pid) + ",";
  for (auto line : lines_of(log)) {
    if (line.find(killed) != std::string_view::npos) return true;
    if (line.find("oom-kill:") != std::string_view::npos && line.find(field) != std::string_view::npos) return true;
  }
  return false;
}

std::optional<bool> kernel_log_says_oom_killed(pid_t pid) {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string log;
  char record[8192];
  // One record a read, oldest first, until none is left (EAGAIN); bounded, as the ring is.
  for (int i = 0; i < 100000 && log.size() < (16u << 20); ++i) {
    const long n = posix::read_some(fd, record, sizeof record);
    if (n < 0 && errno == EPIPE) continue;  // records overwritten while reading: go on from the next
    if (n <= 0) break;
    log.append(record, static_cast<size_t>(n));
    if (log.back() != '\n') log += '\n';
  }
  ::close(fd);
  return log_says_oom_killed(log, pid);
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.0f} KiB", b / 1024.0);
}

}  // namespace dtl::node
