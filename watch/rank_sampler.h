// Each rank's figures from /proc, as the hang watch samples them once a second: kept here, so that
// `dtlaunch top` and the metrics read the newest sample instead of /proc again, and so that a CPU
// share comes from two samples a known time apart. Nothing here reads /proc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/proc_stat.h"
#include "watch/hang_state.h"

namespace dtl::watch {

/// One rank's figures at one moment.
struct RankUsage {
  char state = '?';                   ///< /proc/PID/stat's
  double cpu_s = 0;                   ///< CPU time of the rank and its children so far
  std::optional<double> cpu_percent;  ///< of one CPU, between the last two samples; nullopt: one sample yet
  unsigned long long rss_bytes = 0;   ///< the rank's own resident memory
  HangClock::time_point at;
};

class RankSampler {
 public:
  /// A sample of `pid` read at `now`. One closer than a tenth of a second to the one before updates
  /// its state and memory only: too short a span says little of a CPU share.
  void record(pid_t pid, HangClock::time_point now, const node::ProcUsage& usage);
  /// The newest sample of `pid`, if it is at most `max_age` old at `now`.
  std::optional<RankUsage> latest(pid_t pid, HangClock::time_point now, std::chrono::milliseconds max_age) const;
  /// Forgets every pid but these (the running ranks).
  void keep_only(const std::vector<pid_t>& running);

 private:
  std::map<pid_t, RankUsage> seen_;
};

/// What a rank is doing as /proc tells it, in the hang watch's words: "running" when it used a
/// fifth of a CPU, "blocked in the kernel (D)", else "blocked".
std::string doing_from_proc(double cpu_percent, char state);

}  // namespace dtl::watch
