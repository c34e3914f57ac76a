#include "node/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

#include "base/posix.h"

namespace dtl::node {

std::optional<ProcStat> parse_proc_stat(std::string_view stat) {
  // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = stat.substr(close + 1);
  const auto next = [&rest]() -> std::string_view {  // the next field, "" past the end
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) return {};
    rest = rest.substr(start);
    const size_t end = std::min(rest.find(' '), rest.size());
    std::string_view field = rest.substr(0, end);
    rest = rest.substr(end);
    return field;
  };
  const auto number = [](std::string_view field, auto& value) {
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    return ec == std::errc() && ptr != field.data();
  };
  ProcStat s;
  const std::string_view state = next();
  if (state.empty()) return std::nullopt;
  s.state = state.front();
  next();  // ppid
  next();  // pgrp
  if (!number(next(), s.session)) return std::nullopt;
  for (int field = 7; field < 14; ++field) next();  // tty_nr .. cmajflt
  unsigned long long utime = 0, stime = 0;
  if (number(next(), utime) && number(next(), stime)) s.cpu_ticks = utime + stime;
  for (int field = 16; field < 24; ++field) next();  // cutime .. vsize
  if (unsigned long long rss = 0; s.cpu_ticks && number(next(), rss)) s.rss_pages = rss;
  return s;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const long n = posix::read_some(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string_view(buf, static_cast<size_t>(n)));
}

namespace {

constexpr int kMaxDescendants = 256;

void add_descendants(pid_t pid, double tick_s, ProcUsage& usage, int& budget) {
  std::istringstream children(
      posix::read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t child; budget > 0 && children >> child; --budget) {
    const auto stat = read_proc_stat(child);
    if (!stat) continue;
    usage.cpu_s += static_cast<double>(stat->cpu_ticks.value_or(0)) * tick_s;
    add_descendants(child, tick_s, usage, budget);
  }
}

}  // namespace

ProcUsage proc_usage(pid_t pid) {
  static const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  static const unsigned long long page = static_cast<unsigned long long>(sysconf(_SC_PAGESIZE));
  ProcUsage usage;
  const auto stat = read_proc_stat(pid);
  if (!stat) return usage;
  usage.state = stat->state;
  usage.rss_bytes = stat->rss_pages.value_or(0) * page;
  usage.cpu_s = static_cast<double>(stat->cpu_ticks.value_or(0)) * tick_s;
  int budget = kMaxDescendants;
  add_descendants(pid, tick_s, usage, budget);  // data-loader workers, a compiler it waits on
  return usage;
}

}  // namespace dtl::node
