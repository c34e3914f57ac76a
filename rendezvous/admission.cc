#include "rendezvous/admission.h"

#include <algorithm>

namespace dtl::rendezvous {

AdmissionLimits admission_limits(uint64_t fd_limit) {
  AdmissionLimits l;
  l.total = static_cast<size_t>(std::clamp<uint64_t>(fd_limit / 4, 4, 1024));
  l.per_source = std::max<size_t>(l.total / 4, 1);
  return l;
}

std::string source_of(const boost::asio::ip::address& address) {
  if (address.is_v4()) return address.to_string();
  auto v6 = address.to_v6();
  if (v6.is_v4_mapped()) return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6).to_string();
  auto bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return boost::asio::ip::address_v6(bytes).to_string() + "/64";
}

size_t Admission::from(const std::string& source) const {
  auto it = by_source_.find(source);
  return it == by_source_.end() ? 0 : it->second.size();
}

Admission::Verdict Admission::arrive(NodeId id, const std::string& source, Clock::time_point now) {
  Verdict v;
  const size_t mine = from(source);
  const auto stalled = [&](NodeId other) { return now - conns_.at(other).since >= limits_.stale; };
  if (mine >= limits_.per_source) {
    if (mine == 0) return v;
    NodeId oldest = *by_source_.at(source).begin();
    if (!stalled(oldest)) return v;
    v.evicted = oldest;
  } else if (conns_.size() >= limits_.total) {
    if (by_count_.empty()) return v;  // a limit of 0: none at all
    const auto& [most, address] = *by_count_.rbegin();
    if (most > mine + 1) {
      v.evicted = *by_source_.at(address).begin();
    } else if (auto old = oldest_stale(now)) {
      v.evicted = *old;
    } else {
      return v;
    }
  }
  if (v.evicted) leave(*v.evicted);
  add(id, source, now);
  v.admitted = true;
  return v;
}

void Admission::add(NodeId id, const std::string& source, Clock::time_point now) {
  auto& ids = by_source_[source];
  recount(source, ids.size(), ids.size() + 1);
  ids.insert(id);
  conns_[id] = Entry{source, now};
}

void Admission::leave(NodeId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  auto& ids = by_source_.at(it->second.source);
  recount(it->second.source, ids.size(), ids.size() - 1);
  ids.erase(id);
  if (ids.empty()) by_source_.erase(it->second.source);
  conns_.erase(it);
}

void Admission::recount(const std::string& source, size_t before, size_t after) {
  if (before) by_count_.erase({before, source});
  if (after) by_count_.insert({after, source});
}

std::vector<NodeId> Admission::expired(Clock::time_point now) const {
  std::vector<NodeId> out;
  for (const auto& [id, e] : conns_) {
    if (now - e.since < limits_.deadline) break;
    out.push_back(id);
  }
  return out;
}

std::optional<NodeId> Admission::oldest_stale(Clock::time_point now) const {
  if (conns_.empty() || now - conns_.begin()->second.since < limits_.stale) return std::nullopt;
  return conns_.begin()->first;
}

}  // namespace dtl::rendezvous
