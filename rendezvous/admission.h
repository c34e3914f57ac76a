// Which connections that have not proven the token the server keeps. Anyone who reaches the port
// can open them, so they get a share of the descriptors (in all, and per address) and a deadline;
// members that proved the token never count. A pure function of (connections, now), like RoundState.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/address.hpp>

#include "rendezvous/round_state.h"

namespace dtl::rendezvous {

struct AdmissionLimits {
  size_t total = 256;       ///< connections not yet authenticated, held at once
  size_t per_source = 64;   ///< of those, from one address (one /64 for IPv6)
  /// A handshake takes a few round trips; one this old is stalled and gives way to a newcomer.
  Clock::duration stale = std::chrono::seconds(1);
  Clock::duration deadline = std::chrono::seconds(3);  ///< no token proven by then: closed
};

/// Limits for a process that may open `fd_limit` descriptors: a quarter of them (at most 1024) for
/// unauthenticated peers, a quarter of that per address; the rest stays for members, workers, logs.
AdmissionLimits admission_limits(uint64_t fd_limit);

/// What a peer's connections are counted under: its address, or its /64 for IPv6 (one host has a
/// whole /64 to choose from); an IPv4 address mapped into IPv6 counts as the IPv4 one.
std::string source_of(const boost::asio::ip::address& address);

class Admission {
 public:
  /// What to do with a new connection: keep it or close it at once, and which (stalled, or from
  /// the address holding the most) is closed to make room for it.
  struct Verdict {
    bool admitted = false;
    std::optional<NodeId> evicted;
  };

  explicit Admission(AdmissionLimits limits) : limits_(limits) {}

  /// Connection `id` (ids grow with time) arrived from `source`. An address at its limit gets room
  /// only from its own stalled connections; when all are taken, the address holding the most gives
  /// way if it holds more than the newcomer's would, else the oldest of all if it is stalled.
  /// Otherwise the newcomer is shed: young handshakes are never cut short for another.
  Verdict arrive(NodeId id, const std::string& source, Clock::time_point now);
  /// It proved the token, or it closed: it no longer counts. Unknown ids are ignored.
  void leave(NodeId id);
  /// Those past the deadline, oldest first (they stay counted until `leave`).
  std::vector<NodeId> expired(Clock::time_point now) const;
  /// The oldest one, if it is stalled: what to close when descriptors run out.
  std::optional<NodeId> oldest_stale(Clock::time_point now) const;

  size_t size() const { return conns_.size(); }
  size_t from(const std::string& source) const;
  const AdmissionLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::string source;
    Clock::time_point since;
  };
  void add(NodeId id, const std::string& source, Clock::time_point now);
  void recount(const std::string& source, size_t before, size_t after);

  AdmissionLimits limits_;
  std::map<NodeId, Entry> conns_;                       ///< oldest first
  std::map<std::string, std::set<NodeId>> by_source_;   ///< each address's, oldest first
  std::set<std::pair<size_t, std::string>> by_count_;   ///< (how many, address): the largest last
};

}  // namespace dtl::rendezvous
