#include "store/state.h"

#include <algorithm>
#include <charconv>

namespace dtl::store {
namespace {

std::string byte(uint8_t b) { return std::string(1, static_cast<char>(b)); }

std::string i64(int64_t v) {
  std::string s;
  put_i64(s, v);
  return s;
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
    return "the store is full (" + std::to_string(limits_.max_bytes) + " bytes of keys and values)";
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
  for (const auto& key : w->second.keys) {
    if (except_key && key == *except_key) continue;
    auto list = waiting_.find(key);
    if (list == waiting_.end()) continue;
    std::erase(list->second, id);
    if (list->second.empty()) waiting_.erase(list);
  }
  auto& mine = by_client_[w->second.client];
  std::erase(mine, id);
  if (mine.empty()) by_client_.erase(w->second.client);
  waits_.erase(w);
}

void StoreState::wake(const std::string& key, std::vector<Outgoing>& out, bool just_one) {
  auto list = waiting_.find(key);
  if (list == waiting_.end()) return;
  std::vector<uint64_t> ids;
  if (just_one) {
    ids.push_back(list->second.front());
    list->second.erase(list->second.begin());
    if (list->second.empty()) waiting_.erase(list);
  } else {
    ids = std::move(list->second);
    waiting_.erase(list);
  }
  for (uint64_t id : ids) {
    auto w = waits_.find(id);
    if (w == waits_.end()) continue;
    std::erase(w->second.keys, key);
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
      std::string s;
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
        int64_t old = 0;
        const auto& text = it->second;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), old);
        if (ec != std::errc() || end != text.data() + text.size()) return "add on key '" + key + "', which holds no integer";
        if (__builtin_add_overflow(old, r.number, &value)) return "add on key '" + key + "' overflows";
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
      std::vector<std::string> missing;
      for (auto& key : r.keys) {
        if (!ready(key) && std::find(missing.begin(), missing.end(), key) == missing.end()) missing.push_back(key);
      }
      if (missing.empty()) {
        reply(byte(kStopWaiting));
        return std::nullopt;
      }
      auto& mine = by_client_[from];
      if (mine.size() >= limits_.max_waits_per_client) {
        return "more than " + std::to_string(limits_.max_waits_per_client) + " waits pending on one connection";
      }
      const uint64_t id = next_wait_++;
      mine.push_back(id);
      for (const auto& key : missing) waiting_[key].push_back(id);
      waits_.emplace(id, Wait{from, missing.size(), std::move(missing)});
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
      std::string value = it == kv_.end() ? std::move(r.values[0]) : it->second + r.values[0];
      if (auto err = put(key, std::move(value))) return err;
      wake(key, out);
      return std::nullopt;
    }
    case Op::queue_push: {
      const std::string& key = r.keys[0];
      if (bytes_ + key.size() + r.values[0].size() > limits_.max_bytes) {
        return "the store is full (" + std::to_string(limits_.max_bytes) + " bytes of keys and values)";
      }
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

void StoreState::forget(ClientId c) {
  auto mine = by_client_.find(c);
  if (mine == by_client_.end()) return;
  const auto ids = mine->second;
  for (uint64_t id : ids) drop_wait(id, nullptr);
}

void StoreState::clear() {
  kv_ = {};
  queues_ = {};
  waits_ = {};
  waiting_ = {};
  by_client_ = {};
  bytes_ = 0;
}

}  // namespace dtl::store
