#include "store/store_state.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <unordered_set>

namespace dtl::store {
namespace {

std::string byte(uint8_t b) { return std::string(1, static_cast<char>(b)); }

std::string i64(int64_t v) {
  std::string s;
  put_i64(s, v);
  return s;
}

/// What a pending wait holds per key: the key in Wait::keys and in waiting_ (a node of each map
/// and the set's node around it, about 96 bytes more).
uint64_t wait_cost(const std::string& key) { return 2 * key.size() + 96; }

/// A counter's value (add's, barrier's): the decimal text torch's servers keep.
std::optional<std::string> counted(const std::string& op, const std::string& key, const std::string& text,
                                   int64_t delta, int64_t& value) {
  int64_t old = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), old);
  if (ec != std::errc() || end != text.data() + text.size())
    return op + " on key '" + key + "', which holds no integer";
  if (__builtin_add_overflow(old, delta, &value)) return op + " on key '" + key + "' overflows";
  return std::nullopt;
}

std::string full(uint64_t max_bytes) {
  return "the store is full (" + std::to_string(max_bytes) + " bytes of keys and values)";
}

}  // namespace

bool StoreState::ready(const std::string& key) const {
  if (kv_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

std::optional<std::string> StoreState::put(const std::string& key, std::string value) {
  auto it = kv_.find(key);
  const uint64_t old = it == kv_.end() ? 0 : key.size() + it->second.size();
  const uint64_t now = bytes_ - old + key.size() + value.size();
  if (now > limits_.max_bytes) {
    return full(limits_.max_bytes);
  }
  bytes_ = now;
  if (it == kv_.end()) {
    kv_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return std::nullopt;
}

void StoreState::drop_wait(uint64_t id, const std::string* except_key) {
  auto w = waits_.find(id);
  if (w == waits_.end()) return;
  // Keys already woken are still listed (wake() keeps only a count, erasing each would cost the
  // whole list per key); their entry in waiting_ is gone or no longer holds `id`.
  for (const auto& key : w->second.keys) {
    if (except_key && key == *except_key) continue;
    auto list = waiting_.find(key);
    if (list == waiting_.end()) continue;
    list->second.erase(id);
    if (list->second.empty()) waiting_.erase(list);
  }
  wait_bytes_ -= w->second.cost;
  auto& mine = by_client_[w->second.client];
  std::erase(mine, id);
  if (mine.empty()) by_client_.erase(w->second.client);
  waits_.erase(w);
}

void StoreState::wake(const std::string& key, std::vector<Outgoing>& out, bool just_one) {
  auto list = waiting_.find(key);
  if (list == waiting_.end()) return;
  std::set<uint64_t> ids;
  if (just_one) {
    ids.insert(list->second.extract(list->second.begin()));
    if (list->second.empty()) waiting_.erase(list);
  } else {
    ids = std::move(list->second);
    waiting_.erase(list);
  }
  for (uint64_t id : ids) {
    auto w = waits_.find(id);
    if (w == waits_.end()) continue;
    if (--w->second.remaining > 0) continue;
    out.push_back({w->second.client, byte(kStopWaiting)});
    drop_wait(id, nullptr);
  }
}

std::optional<std::string> StoreState::handle(ClientId from, Request& r, std::vector<Outgoing>& out) {
  auto reply = [&](std::string bytes) { out.push_back({from, std::move(bytes)}); };
  switch (r.op) {
    case Op::validate:
      return std::nullopt;
    case Op::ping: {
      std::string s;
      put_u32(s, static_cast<uint32_t>(r.number));
      reply(std::move(s));
      return std::nullopt;
    }
    case Op::set:
      if (auto err = put(r.keys[0], std::move(r.values[0]))) return err;
      wake(r.keys[0], out);
      return std::nullopt;
    case Op::multi_set:
      for (size_t i = 0; i < r.keys.size(); ++i) {
        if (auto err = put(r.keys[i], std::move(r.values[i]))) return err;
        wake(r.keys[i], out);
      }
      return std::nullopt;
    case Op::compare_set: {
      // torch's answers: a missing key is set only when `expected` is empty, and the reply is the
      // value now stored, or `expected` itself when the key is missing and stays so.
      const std::string& key = r.keys[0];
      auto it = kv_.find(key);
      std::string now;
      if (it == kv_.end()) {
        if (r.values[0].empty()) {
          now = r.values[1];
          if (auto err = put(key, std::move(r.values[1]))) return err;
        } else {
          now = r.values[0];
        }
      } else {
        if (it->second == r.values[0]) {
          if (auto err = put(key, std::move(r.values[1]))) return err;
        }
        now = kv_.at(key);
      }
      std::string s;
      put_bytes(s, now);
      reply(std::move(s));
      if (kv_.count(key)) wake(key, out);
      return std::nullopt;
    }
    case Op::get: {
      std::string s;
      auto it = kv_.find(r.keys[0]);
      put_bytes(s, it == kv_.end() ? std::string() : it->second);
      reply(std::move(s));
      return std::nullopt;
    }
    case Op::multi_get: {
      uint64_t size = 0;
      for (const auto& key : r.keys) {
        auto it = kv_.find(key);
        size += 8 + (it == kv_.end() ? 0 : it->second.size());
      }
      if (size > limits_.max_reply) {
        return "multi_get's reply would be " + std::to_string(size) + " bytes, over " +
               std::to_string(limits_.max_reply);
      }
      std::string s;
      s.reserve(size);
      for (const auto& key : r.keys) {
        auto it = kv_.find(key);
        put_bytes(s, it == kv_.end() ? std::string() : it->second);
      }
      reply(std::move(s));
      return std::nullopt;
    }
    case Op::add: {
      const std::string& key = r.keys[0];
      int64_t value = r.number;
      if (auto it = kv_.find(key); it != kv_.end()) {
        if (auto err = counted("add", key, it->second, r.number, value)) return err;
      }
      if (auto err = put(key, std::to_string(value))) return err;
      reply(i64(value));
      wake(key, out);
      return std::nullopt;
    }
    case Op::check:
      reply(byte(std::all_of(r.keys.begin(), r.keys.end(), [&](const auto& k) { return ready(k); }) ? kReady
                                                                                                    : kNotReady));
      return std::nullopt;
    case Op::wait: {
      if (r.keys.size() > limits_.max_wait_keys) {
        return "a wait on " + std::to_string(r.keys.size()) + " keys (at most " +
               std::to_string(limits_.max_wait_keys) + ")";
      }
      // A hash set finds repeats: a search of `missing` per key made a long wait quadratic.
      // It views the strings in `missing`, which the reserve keeps in place.
      std::unordered_set<std::string_view> seen;
      seen.reserve(r.keys.size());
      std::vector<std::string> missing;
      missing.reserve(r.keys.size());
      uint64_t cost = 0;
      for (auto& key : r.keys) {
        if (seen.count(key) || ready(key)) continue;
        cost += wait_cost(key);
        missing.push_back(std::move(key));
        seen.insert(missing.back());
      }
      if (missing.empty()) {
        reply(byte(kStopWaiting));
        return std::nullopt;
      }
      return enqueue_wait(from, std::move(missing), cost);
    }
    case Op::barrier: {
      // As torch's libuv server: the key counts the arrivals (text, as add's); the one that reaches
      // the world size wakes every wait on the key and is answered at once, the others wait on it.
      // Arrivals before that wake nobody, though they set the key.
      const std::string& key = r.keys[0];
      int64_t count = 1;
      if (auto it = kv_.find(key); it != kv_.end()) {
        if (auto err = counted("barrier", key, it->second, 1, count)) return err;
      }
      if (auto err = put(key, std::to_string(count))) return err;
      if (count < r.number) return enqueue_wait(from, {key}, wait_cost(key));
      wake(key, out);
      reply(byte(kStopWaiting));
      return std::nullopt;
    }
    case Op::list_keys: {
      // torch's reply: the number of keys, then each (its client keeps those under its prefix).
      uint64_t size = 8;
      for (const auto& [key, value] : kv_) size += 8 + key.size();
      if (size > limits_.max_reply) {
        return "list_keys's reply would be " + std::to_string(size) + " bytes, over " +
               std::to_string(limits_.max_reply);
      }
      std::string s;
      s.reserve(size);
      put_i64(s, static_cast<int64_t>(kv_.size()));
      for (const auto& [key, value] : kv_) put_bytes(s, key);
      reply(std::move(s));
      return std::nullopt;
    }
    case Op::cancel_wait:
      forget(from);
      reply(byte(kWaitCanceled));
      return std::nullopt;
    case Op::num_keys:
      reply(i64(static_cast<int64_t>(kv_.size())));
      return std::nullopt;
    case Op::delete_key: {
      auto it = kv_.find(r.keys[0]);
      int64_t n = 0;
      if (it != kv_.end()) {
        bytes_ -= it->first.size() + it->second.size();
        kv_.erase(it);
        n = 1;
      }
      reply(i64(n));
      return std::nullopt;
    }
    case Op::append: {
      const std::string& key = r.keys[0];
      auto it = kv_.find(key);
      if (it == kv_.end()) {
        if (auto err = put(key, std::move(r.values[0]))) return err;
      } else {
        // In place: a copy of the whole value per append made a long series of them quadratic.
        const uint64_t more = r.values[0].size();
        if (it->second.size() + more > limits_.max_value) {
          return "append would grow key '" + key + "' past " + std::to_string(limits_.max_value) + " bytes";
        }
        if (bytes_ + more > limits_.max_bytes) return full(limits_.max_bytes);
        it->second.append(r.values[0]);
        bytes_ += more;
      }
      wake(key, out);
      return std::nullopt;
    }
    case Op::queue_push: {
      const std::string& key = r.keys[0];
      if (bytes_ + key.size() + r.values[0].size() > limits_.max_bytes) return full(limits_.max_bytes);
      bytes_ += key.size() + r.values[0].size();
      queues_[key].push_back(std::move(r.values[0]));
      wake(key, out, /*just_one=*/true);
      return std::nullopt;
    }
    case Op::queue_pop: {
      // The size before the pop, then the value when there was one (torch's client waits first).
      std::string s;
      auto q = queues_.find(r.keys[0]);
      const int64_t n = q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size());
      put_i64(s, n);
      if (n > 0) {
        put_bytes(s, q->second.front());
        bytes_ -= q->first.size() + q->second.front().size();
        q->second.pop_front();
        if (q->second.empty()) queues_.erase(q);
      }
      reply(std::move(s));
      return std::nullopt;
    }
    case Op::queue_len: {
      auto q = queues_.find(r.keys[0]);
      reply(i64(q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size())));
      return std::nullopt;
    }
  }
  return "unhandled request";
}

std::optional<std::string> StoreState::enqueue_wait(ClientId from, std::vector<std::string> keys, uint64_t cost) {
  auto& mine = by_client_[from];
  if (mine.size() >= limits_.max_waits_per_client) {
    return "more than " + std::to_string(limits_.max_waits_per_client) + " waits pending on one connection";
  }
  if (wait_bytes_ + cost > limits_.max_wait_bytes) {
    return "pending waits would hold over " + std::to_string(limits_.max_wait_bytes) + " bytes of keys";
  }
  wait_bytes_ += cost;
  const uint64_t id = next_wait_++;
  mine.push_back(id);
  for (const auto& key : keys) {
    auto& list = waiting_[key];
    list.insert(list.end(), id);
  }
  waits_.emplace(id, Wait{from, keys.size(), std::move(keys), cost});
  return std::nullopt;
}

void StoreState::forget(ClientId c) {
  auto mine = by_client_.find(c);
  if (mine == by_client_.end()) return;
  const auto ids = mine->second;
  for (uint64_t id : ids) drop_wait(id, nullptr);
  by_client_.erase(c);  // also when it held none: a wait refused for a cap leaves the entry empty
}

void StoreState::clear() {
  kv_ = {};
  queues_ = {};
  waits_ = {};
  waiting_ = {};
  by_client_ = {};
  bytes_ = 0;
  wait_bytes_ = 0;
}

}  // namespace dtl::store
