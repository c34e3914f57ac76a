#include "watch/hang_state.h"

#include <algorithm>

namespace dtl::watch {

namespace {

/// Of one CPU over the window: computing, not waiting. A rank blocked in a collective or the store
/// uses next to none (0-1 % measured with gloo); one that computes on a machine shared three ways
/// still has a third.
constexpr double kBusyShare = 0.2;
/// Of the window's samples, runnable (R): computing, though it got less than kBusyShare of a CPU
/// (8 ranks importing torch on 2 cores shared with other work get about a tenth each). A rank that
/// waits sleeps (S).
constexpr double kRunnableShare = 0.5;

double seconds(HangClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

HangState::HangState(std::chrono::milliseconds timeout, std::chrono::milliseconds window)
    : timeout_(timeout), window_(std::min(window, timeout)) {}

void HangState::reset() {
  seen_.clear();
  reported_at_.reset();
  signalled_ = false;
  quietly_busy_ = false;
}

HangClock::time_point HangState::record(HangClock::time_point now, const std::vector<RankSample>& ranks) {
  std::erase_if(seen_, [&](const auto& entry) {
    return std::none_of(ranks.begin(), ranks.end(), [&](const RankSample& r) { return r.pid == entry.first; });
  });
  HangClock::time_point last = ranks.front().last_output;
  for (const auto& r : ranks) {
    auto& seen = seen_[r.pid];
    auto& cpu = seen.cpu;
    cpu.emplace_back(now, r.cpu_s);
    // Keep the newest sample at or before the window's start as its base.
    while (cpu.size() > 2 && cpu[1].first <= now - window_) cpu.erase(cpu.begin());
    seen.runnable.emplace_back(now, r.state == 'R');
    while (!seen.runnable.empty() && seen.runnable.front().first <= now - window_) seen.runnable.pop_front();
    last = std::max(last, r.last_output);
  }
  return last;
}

Hang HangState::snapshot(HangClock::time_point now, HangClock::time_point last, const std::vector<RankSample>& ranks) {
  Hang hang{seconds(now - last), {}, "", {}};
  for (const auto& r : ranks) {
    const auto& cpu = seen_[r.pid].cpu;
    const double span = seconds(now - cpu.front().first);
    HungRank h;
    h.rank = r.rank;
    h.local_rank = r.local_rank;
    h.pid = r.pid;
    h.state = r.state;
    h.cpu_percent = span > 0 ? 100 * (r.cpu_s - cpu.front().second) / span : 0;
    h.quiet_s = seconds(now - r.last_output);
    const auto& runnable = seen_[r.pid].runnable;
    const auto running = std::count_if(runnable.begin(), runnable.end(), [](const auto& s) { return s.second; });
    const bool mostly_runnable = !runnable.empty() && running >= kRunnableShare * static_cast<double>(runnable.size());
    h.busy = (h.cpu_percent >= 100 * kBusyShare || mostly_runnable) && r.state != 'D';
    hang.ranks.push_back(std::move(h));
  }
  return hang;
}

std::optional<Hang> HangState::on_sample(HangClock::time_point now, const std::vector<RankSample>& ranks) {
  quietly_busy_ = false;
  if (ranks.empty()) return std::nullopt;
  const auto last = record(now, ranks);
  if (reported_at_ && last > *reported_at_) reported_at_.reset();  // a rank printed: that hang is over
  if (now - last < timeout_ || signalled_) return std::nullopt;
  for (const auto& r : ranks) {
    // not watched long enough to tell busy from blocked
    if (seconds(now - seen_[r.pid].cpu.front().first) < 0.9 * seconds(window_)) return std::nullopt;
  }
  Hang hang = snapshot(now, last, ranks);
  if (std::all_of(hang.ranks.begin(), hang.ranks.end(), [](const HungRank& r) { return r.busy; })) {
    reported_at_.reset();  // computing quietly: progress, not a hang, unless the flight recorder says otherwise
    quietly_busy_ = true;
    return std::nullopt;
  }
  if (reported_at_) return std::nullopt;
  reported_at_ = last;
  return hang;
}

std::optional<Hang> HangState::on_signal(HangClock::time_point now, const std::vector<RankSample>& ranks,
                                         std::string cause) {
  if (ranks.empty() || signalled_) return std::nullopt;
  signalled_ = true;
  Hang hang = snapshot(now, record(now, ranks), ranks);
  hang.cause = std::move(cause);
  return hang;
}

}  // namespace dtl::watch
