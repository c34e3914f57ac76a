// The store's contents and waits, as plain data: requests go in, replies come out addressed to a
// client id, so every rule (compare_set's odd answers, waits woken by key, queues) is tested
// without sockets. Waits are found by key, never by scanning the waiters.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/protocol.h"

namespace dtl::store {

using ClientId = uint64_t;

struct StateLimits {
  uint64_t max_bytes = 1ull << 30;   ///< keys and values together; past it a write drops its client
  size_t max_waits_per_client = 64;  ///< torch's clients have one; 1.13's after a timeout, a few
  /// Keys in one wait: torch waits on a handful; a wait's cost is per key, so a bound keeps one
  /// request from holding the event loop or the memory.
  size_t max_wait_keys = 4096;
  /// What pending waits hold, all clients together (see wait_cost): without it, waits that never
  /// end could hold any amount of keys.
  uint64_t max_wait_bytes = 256ull << 20;
  uint64_t max_value = 64ull << 20;  ///< APPEND grows no value past it (the server sets Limits'.)
  /// One reply (multi_get repeats a value once per key asked: 128 Ki times 64 MiB otherwise).
  uint64_t max_reply = 128ull << 20;
};

/// Bytes for one client.
struct Outgoing {
  ClientId to;
  std::string bytes;
};

class StoreState {
 public:
  explicit StoreState(StateLimits limits = {}) : limits_(limits) {}
  /// Carries out `r` for `from`: its reply, and STOP_WAITING for each wait it completed, go to
  /// `out`. An error (a full store, add on a value that is no number): drop `from`.
  std::optional<std::string> handle(ClientId from, Request& r, std::vector<Outgoing>& out);
  /// `c` hung up: its waits go.
  void forget(ClientId c);
  /// A new worker group: every key, queue and wait goes, and the memory with them.
  void clear();

  size_t keys() const { return kv_.size(); }
  uint64_t bytes() const { return bytes_; }
  size_t waits() const { return waits_.size(); }
  /// What pending waits are charged against max_wait_bytes.
  uint64_t wait_bytes() const { return wait_bytes_; }
  /// Keys that some wait is registered on (for tests: nothing lingers).
  size_t awaited_keys() const { return waiting_.size(); }

 private:
  struct Wait {
    ClientId client;
    size_t remaining;               ///< keys not set yet
    std::vector<std::string> keys;  ///< those it registered on; some may have been woken since
    uint64_t cost;                  ///< charged to wait_bytes_
  };
  bool ready(const std::string& key) const;
  std::optional<std::string> put(const std::string& key, std::string value);
  void wake(const std::string& key, std::vector<Outgoing>& out, bool just_one = false);
  void drop_wait(uint64_t id, const std::string* except_key);
  /// Registers a wait of `from` on `keys` (none set yet, no repeats), charged `cost`; an error drops `from`.
  std::optional<std::string> enqueue_wait(ClientId from, std::vector<std::string> keys, uint64_t cost);

  StateLimits limits_;
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  uint64_t bytes_ = 0;
  uint64_t wait_bytes_ = 0;
  uint64_t next_wait_ = 1;
  std::unordered_map<uint64_t, Wait> waits_;
  /// key -> waits, oldest first (ids only grow). A set, not a list: when the N clients waiting on
  /// one key hang up, each takes itself out in log N, not N.
  std::unordered_map<std::string, std::set<uint64_t>> waiting_;
  std::unordered_map<ClientId, std::vector<uint64_t>> by_client_;
};

}  // namespace dtl::store
