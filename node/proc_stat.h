// One process's line of /proc/PID/stat, read once here for every caller: the orphan guard's
// sessions, the expiration timers' "is it one of ours", the hang watch's state and CPU time.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>

namespace dtl::node {

struct ProcStat {
  char state = '?';  ///< R, S, D, Z, T...
  pid_t session = 0;
  std::optional<unsigned long long> cpu_ticks;  ///< utime + stime, when the text reaches them
  std::optional<unsigned long long> rss_pages;  ///< resident pages, when the text reaches them
};

/// The fields of /proc/PID/stat's text, whose second (the command name) may hold spaces and
/// parentheses; nullopt when it is cut before the session. Allocates nothing (the orphan guard
/// calls it).
std::optional<ProcStat> parse_proc_stat(std::string_view stat);

/// The process's /proc/PID/stat; nullopt when it is gone.
std::optional<ProcStat> read_proc_stat(pid_t pid);

/// /proc/PID/stat's state, and the CPU seconds of the process and its live descendants (256 at most).
struct ProcUsage {
  char state = '?';
  double cpu_s = 0;
  unsigned long long rss_bytes = 0;  ///< the process's own resident memory (its children's pages are often shared)
};
ProcUsage proc_usage(pid_t pid);

}  // namespace dtl::node
