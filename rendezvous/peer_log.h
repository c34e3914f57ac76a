// What peers that never proved the token did, said at most once per interval: a line for each of
// their connections would let anyone who reaches the port flood the host's console (6,000 lines in
// one attack). The first after a quiet interval is said in full, the rest are counted and summed
// up in one line. Time comes in as `now`, so tests drive it without clocks.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "rendezvous/round_state.h"

namespace dtl::rendezvous {

/// How a connection that had not proven the token ended.
enum class Ending { refused, dropped, hung_up, timed_out, shed };

class PeerLog {
 public:
  explicit PeerLog(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  /// A connection from `source` ended as `how`; `line` says so in full (peer text already made
  /// printable). Returns `line` when it may be said now, else counts it for the summary.
  std::optional<std::string> note(Ending how, const std::string& source, std::string line, Clock::time_point now);
  /// When the summary of what was counted is due; none while nothing is counted.
  std::optional<Clock::time_point> due() const;
  /// One line for everything counted since the last line ("1000 connections ... in the last 10 s:
  /// ..."), and a new interval from `now`; none when nothing was counted. Call it when due, and at
  /// the end whatever the time.
  std::optional<std::string> summary(Clock::time_point now);

 private:
  static constexpr size_t kMaxSources = 4096;  ///< addresses told apart in one summary

  Clock::duration interval_;
  std::optional<Clock::time_point> last_line_;
  size_t counted_ = 0;
  std::array<size_t, 5> by_ending_{};
  std::map<std::string, size_t> by_source_;
  size_t other_sources_ = 0;  ///< connections from addresses past kMaxSources
};

}  // namespace dtl::rendezvous
