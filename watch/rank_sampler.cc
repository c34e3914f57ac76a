#include "watch/rank_sampler.h"

#include <algorithm>

namespace dtl::watch {

namespace {

constexpr auto kShortestSpan = std::chrono::milliseconds(100);
constexpr double kBusyPercent = 20;  ///< the hang watch's: a fifth of a CPU

}  // namespace

void RankSampler::record(pid_t pid, HangClock::time_point now, const node::ProcUsage& usage) {
  auto before = seen_.find(pid);
  if (before == seen_.end()) {
    seen_[pid] = RankUsage{usage.state, usage.cpu_s, std::nullopt, usage.rss_bytes, now};
    return;
  }
  RankUsage& prev = before->second;
  prev.state = usage.state;
  prev.rss_bytes = usage.rss_bytes;
  if (now - prev.at < kShortestSpan) return;  // the share and its start stay
  const double span = std::chrono::duration<double>(now - prev.at).count();
  prev.cpu_percent = std::max(0.0, 100 * (usage.cpu_s - prev.cpu_s) / span);
  prev.cpu_s = usage.cpu_s;
  prev.at = now;
}

std::optional<RankUsage> RankSampler::latest(pid_t pid, HangClock::time_point now,
                                             std::chrono::milliseconds max_age) const {
  auto it = seen_.find(pid);
  if (it == seen_.end() || now - it->second.at > max_age) return std::nullopt;
  return it->second;
}

void RankSampler::keep_only(const std::vector<pid_t>& running) {
  std::erase_if(seen_,
                [&](const auto& kv) { return std::find(running.begin(), running.end(), kv.first) == running.end(); });
}

std::string doing_from_proc(double cpu_percent, char state) {
  if (state == 'D') return "blocked in the kernel (D)";
  return cpu_percent >= kBusyPercent ? "running" : "blocked";
}

}  // namespace dtl::watch
