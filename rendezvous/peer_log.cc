#include "rendezvous/peer_log.h"

#include <algorithm>

namespace dtl::rendezvous {
namespace {

constexpr const char* kEndings[] = {"refused", "broke the protocol", "hung up", "did not finish the handshake in time",
                                    "over the connection limits"};

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::optional<std::string> PeerLog::note(Ending how, const std::string& source, std::string line,
                                         Clock::time_point now) {
  if (counted_ == 0 && (!last_line_ || now - *last_line_ >= interval_)) {
    last_line_ = now;
    return line;
  }
  ++counted_;
  ++by_ending_[static_cast<size_t>(how)];
  auto it = by_source_.find(source);
  if (it != by_source_.end()) {
    ++it->second;
  } else if (by_source_.size() < kMaxSources) {
    by_source_.emplace(source, 1);
  } else {
    ++other_sources_;
  }
  return std::nullopt;
}

std::optional<Clock::time_point> PeerLog::due() const {
  if (counted_ == 0) return std::nullopt;
  return *last_line_ + interval_;
}

std::optional<std::string> PeerLog::summary(Clock::time_point now) {
  if (counted_ == 0) return std::nullopt;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - *last_line_).count();
  const long long seconds = std::max<long long>(1, (ms + 999) / 1000);
  std::string line = plural(counted_, "more connection", "more connections") +
                     " from peers that did not prove the token ended in the last " + std::to_string(seconds) + " s:";
  const char* sep = " ";
  for (size_t i = 0; i < by_ending_.size(); ++i) {
    if (!by_ending_[i]) continue;
    line += sep + std::to_string(by_ending_[i]) + " " + kEndings[i];
    sep = ", ";
  }
  auto most = std::max_element(by_source_.begin(), by_source_.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  if (by_source_.size() == 1 && !other_sources_) {
    line += "; from " + most->first;
  } else {
    line += "; from " + (other_sources_ ? "more than " + std::to_string(by_source_.size()) + " addresses"
                                        : plural(by_source_.size(), "address", "addresses"));
    line += ", most from " + most->first + " (" + std::to_string(most->second) + ")";
  }
  last_line_ = now;
  counted_ = 0;
  by_ending_ = {};
  by_source_.clear();
  other_sources_ = 0;
  return line;
}

}  // namespace dtl::rendezvous
