#include <catch2/catch.hpp>

#include "store/store_state.h"

using namespace dtl::store;

namespace {

Request req(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}, int64_t n = 0) {
  return Request{op, std::move(keys), std::move(values), n};
}

std::string i64(int64_t v) {
  std::string s;
  put_i64(s, v);
  return s;
}

std::string bytes(const std::string& v) {
  std::string s;
  put_bytes(s, v);
  return s;
}

/// Runs one request; the replies as (client, bytes).
std::vector<std::pair<ClientId, std::string>> run(StoreState& s, ClientId from, Request r) {
  std::vector<Outgoing> out;
  auto err = s.handle(from, r, out);
  REQUIRE_FALSE(err);
  std::vector<std::pair<ClientId, std::string>> got;
  for (auto& o : out) got.emplace_back(o.to, o.bytes);
  return got;
}

using Replies = std::vector<std::pair<ClientId, std::string>>;
const std::string kStop(1, '\0');

}  // namespace

TEST_CASE("set, get, add and num_keys answer as torch's server does") {
  StoreState s;
  CHECK(run(s, 1, req(Op::set, {"k"}, {"v"})).empty());
  CHECK(run(s, 1, req(Op::get, {"k"})) == Replies{{1, bytes("v")}});
  CHECK(run(s, 1, req(Op::get, {"missing"})) == Replies{{1, bytes("")}});
  CHECK(run(s, 1, req(Op::add, {"c"}, {}, 3)) == Replies{{1, i64(3)}});
  CHECK(run(s, 2, req(Op::add, {"c"}, {}, -5)) == Replies{{2, i64(-2)}});
  CHECK(run(s, 1, req(Op::get, {"c"})) == Replies{{1, bytes("-2")}});
  CHECK(run(s, 1, req(Op::num_keys)) == Replies{{1, i64(2)}});
  CHECK(run(s, 1, req(Op::delete_key, {"k"})) == Replies{{1, i64(1)}});
  CHECK(run(s, 1, req(Op::delete_key, {"k"})) == Replies{{1, i64(0)}});
  CHECK(s.bytes() == 3);  // "c" and "-2"
}

TEST_CASE("compare_set returns what is stored, or expected for a missing key it did not set") {
  StoreState s;
  CHECK(run(s, 1, req(Op::compare_set, {"k"}, {"x", "y"})) == Replies{{1, bytes("x")}});
  CHECK(s.keys() == 0);
  CHECK(run(s, 1, req(Op::compare_set, {"k"}, {"", "a"})) == Replies{{1, bytes("a")}});
  CHECK(run(s, 1, req(Op::compare_set, {"k"}, {"zz", "b"})) == Replies{{1, bytes("a")}});
  CHECK(run(s, 1, req(Op::compare_set, {"k"}, {"a", "b"})) == Replies{{1, bytes("b")}});
}

TEST_CASE("a wait is answered once every one of its keys is set, and only its client is told") {
  StoreState s;
  CHECK(run(s, 7, req(Op::wait, {"a", "b"})).empty());
  CHECK(run(s, 8, req(Op::wait, {"b"})).empty());
  CHECK(s.awaited_keys() == 2);
  CHECK(run(s, 1, req(Op::set, {"a"}, {"1"})).empty());
  CHECK(run(s, 1, req(Op::add, {"b"}, {}, 1)) == Replies{{1, i64(1)}, {7, kStop}, {8, kStop}});
  CHECK(s.waits() == 0);
  CHECK(s.awaited_keys() == 0);
  CHECK(run(s, 7, req(Op::wait, {"a"})) == Replies{{7, kStop}});
}

TEST_CASE("a cancelled wait is forgotten, and cancel answers even with no wait pending") {
  StoreState s;
  CHECK(run(s, 3, req(Op::wait, {"never"})).empty());
  CHECK(run(s, 3, req(Op::cancel_wait)) == Replies{{3, std::string(1, '\1')}});
  CHECK(s.waits() == 0);
  CHECK(s.awaited_keys() == 0);
  CHECK(run(s, 1, req(Op::set, {"never"}, {"x"})).empty());
  CHECK(run(s, 3, req(Op::cancel_wait)) == Replies{{3, std::string(1, '\1')}});
}

TEST_CASE("a client that hangs up takes its waits with it") {
  StoreState s;
  run(s, 3, req(Op::wait, {"x"}));
  run(s, 4, req(Op::wait, {"x"}));
  s.forget(3);
  CHECK(run(s, 1, req(Op::set, {"x"}, {""})) == Replies{{4, kStop}});
}

TEST_CASE("check, append, multi_get and multi_set") {
  StoreState s;
  CHECK(run(s, 1, req(Op::check, {"a"})) == Replies{{1, std::string(1, '\1')}});
  run(s, 1, req(Op::append, {"a"}, {"x"}));
  run(s, 1, req(Op::append, {"a"}, {"y"}));
  CHECK(run(s, 1, req(Op::check, {"a"})) == Replies{{1, std::string(1, '\0')}});
  run(s, 1, req(Op::multi_set, {"m1", "m2"}, {"1", "2"}));
  CHECK(run(s, 1, req(Op::multi_get, {"a", "m2", "m1"})) == Replies{{1, bytes("xy") + bytes("2") + bytes("1")}});
}

TEST_CASE("queues: a push wakes one waiter, pop gives the size then the value") {
  StoreState s;
  run(s, 5, req(Op::wait, {"q"}));
  run(s, 6, req(Op::wait, {"q"}));
  CHECK(run(s, 1, req(Op::queue_push, {"q"}, {"a"})) == Replies{{5, kStop}});
  CHECK(run(s, 1, req(Op::queue_len, {"q"})) == Replies{{1, i64(1)}});
  CHECK(run(s, 5, req(Op::queue_pop, {"q"})) == Replies{{5, i64(1) + bytes("a")}});
  CHECK(run(s, 5, req(Op::queue_pop, {"q"})) == Replies{{5, i64(0)}});
  CHECK(s.bytes() == 0);
}

TEST_CASE("a full store, a non-number under add, and too many waits drop the client") {
  StoreState s({.max_bytes = 10, .max_waits_per_client = 2});
  std::vector<Outgoing> out;
  auto big = req(Op::set, {"k"}, {"0123456789"});
  CHECK(s.handle(1, big, out) == "the store is full (10 bytes of keys and values)");
  auto text = req(Op::set, {"t"}, {"abc"});
  CHECK_FALSE(s.handle(1, text, out));
  auto add = req(Op::add, {"t"}, {}, 1);
  CHECK(s.handle(1, add, out) == "add on key 't', which holds no integer");
  auto w1 = req(Op::wait, {"x"}), w2 = req(Op::wait, {"y"}), w3 = req(Op::wait, {"z"});
  CHECK_FALSE(s.handle(2, w1, out));
  CHECK_FALSE(s.handle(2, w2, out));
  CHECK(s.handle(2, w3, out) == "more than 2 waits pending on one connection");
}

TEST_CASE("clear leaves nothing behind: keys, queues, waits") {
  StoreState s;
  run(s, 1, req(Op::set, {"k"}, {"v"}));
  run(s, 1, req(Op::queue_push, {"q"}, {"v"}));
  run(s, 2, req(Op::wait, {"never"}));
  s.clear();
  CHECK(s.keys() == 0);
  CHECK(s.bytes() == 0);
  CHECK(s.waits() == 0);
  CHECK(s.awaited_keys() == 0);
  CHECK(run(s, 1, req(Op::set, {"never"}, {"v"})).empty());
}

/// "k<i>" (GCC 12 warns falsely about "k" + std::to_string(i)).
std::string key_n(int i) {
  std::string s = std::to_string(i);
  s.insert(s.begin(), 'k');
  return s;
}

TEST_CASE("a long wait: repeats count once, each key wakes it in constant time, and it is bounded") {
  StoreState s;
  std::vector<std::string> keys;
  for (int i = 0; i < 4096; ++i) keys.push_back(key_n(i % 2048));  // each twice
  run(s, 1, req(Op::wait, keys));
  CHECK(s.awaited_keys() == 2048);
  for (int i = 0; i < 2047; ++i) CHECK(run(s, 2, req(Op::set, {key_n(i)}, {"v"})).empty());
  CHECK(run(s, 2, req(Op::set, {"k2047"}, {"v"})) == Replies{{1, kStop}});
  CHECK(s.waits() == 0);
  CHECK(s.awaited_keys() == 0);
  CHECK(s.wait_bytes() == 0);

  std::vector<Outgoing> out;
  auto too_many = req(Op::wait, std::vector<std::string>(4097, "x"));
  CHECK(s.handle(3, too_many, out) == "a wait on 4097 keys (at most 4096)");
  CHECK(s.waits() == 0);
}

TEST_CASE("pending waits' keys are charged to a budget and given back however the wait ends") {
  StoreState s({.max_wait_bytes = 1000});
  run(s, 1, req(Op::wait, {"a", "b"}));
  const uint64_t two = s.wait_bytes();
  CHECK(two > 0);
  run(s, 1, req(Op::set, {"a"}, {"v"}));  // half woken, then its client hangs up
  s.forget(1);
  CHECK(s.wait_bytes() == 0);
  CHECK(s.awaited_keys() == 0);
  std::vector<Outgoing> out;
  auto big = req(Op::wait, {std::string(600, 'x')});
  CHECK(s.handle(2, big, out) == "pending waits would hold over 1000 bytes of keys");
  run(s, 3, req(Op::wait, {"c"}));
  s.clear();
  CHECK(s.wait_bytes() == 0);
}

TEST_CASE("append grows a value in place, never past max_value; multi_get's reply is bounded") {
  StoreState s({.max_value = 8, .max_reply = 40});
  run(s, 1, req(Op::append, {"k"}, {"abc"}));
  run(s, 1, req(Op::append, {"k"}, {"defgh"}));
  CHECK(run(s, 1, req(Op::get, {"k"})) == Replies{{1, bytes("abcdefgh")}});
  CHECK(s.bytes() == 9);
  std::vector<Outgoing> out;
  auto more = req(Op::append, {"k"}, {"i"});
  CHECK(s.handle(1, more, out) == "append would grow key 'k' past 8 bytes");
  CHECK(s.bytes() == 9);
  CHECK(run(s, 1, req(Op::multi_get, {"k", "k"})).size() == 1);  // 2 * (8 + 8) bytes
  auto three = req(Op::multi_get, {"k", "k", "k"});
  CHECK(s.handle(1, three, out) == "multi_get's reply would be 48 bytes, over 40");
}

TEST_CASE("100K waiters on one key: hanging up in any order leaves nothing, and the rest keep their order") {
  // A barrier key of a 100K-rank job whose workers die before it is set: each hang-up takes its
  // wait out of the key's waiters (a list made this quadratic).
  StoreState s;
  constexpr ClientId kClients = 100000;
  for (ClientId c = 1; c <= kClients; ++c) run(s, c, req(Op::wait, {"barrier"}));
  CHECK(s.waits() == kClients);
  for (ClientId c = 1; c <= kClients; c += 2) s.forget(c);  // every odd one, oldest first
  for (ClientId c = kClients; c > 6; c -= 2) s.forget(c);   // the even ones but 2, 4, 6, newest first
  CHECK(s.waits() == 3);
  CHECK(s.awaited_keys() == 1);
  // A queue's push wakes the oldest waiter left.
  CHECK(run(s, 1, req(Op::queue_push, {"barrier"}, {"a"})) == Replies{{2, kStop}});
  CHECK(run(s, 1, req(Op::set, {"barrier"}, {"v"})) == Replies{{4, kStop}, {6, kStop}});
  for (ClientId c = 1; c <= kClients; ++c) run(s, c, req(Op::wait, {"again"}));
  for (ClientId c = 1; c <= kClients; ++c) s.forget(c);
  CHECK(s.waits() == 0);
  CHECK(s.awaited_keys() == 0);
  CHECK(s.wait_bytes() == 0);
}

TEST_CASE("barrier: arrivals count on the key, the last one releases all; list_keys names every key") {
  // torch's libuv server's rules: the count is the key's value; arrivals before the last wake
  // nobody, not even a plain wait on the key; the last is answered at once.
  StoreState s;
  run(s, 9, req(Op::wait, {"b"}));  // before any arrival: the key is missing
  CHECK(run(s, 1, req(Op::barrier, {"b"}, {}, 3)).empty());
  CHECK(run(s, 2, req(Op::barrier, {"b"}, {}, 3)).empty());
  CHECK(run(s, 1, req(Op::get, {"b"})) == Replies{{1, bytes("2")}});  // its own connection: answered
  CHECK(run(s, 3, req(Op::barrier, {"b"}, {}, 3)) == Replies{{9, kStop}, {1, kStop}, {2, kStop}, {3, kStop}});
  CHECK(s.waits() == 0);
  // Past the world size (the same key again) nobody waits.
  CHECK(run(s, 4, req(Op::barrier, {"b"}, {}, 3)) == Replies{{4, kStop}});
  CHECK(run(s, 4, req(Op::barrier, {"one"}, {}, 1)) == Replies{{4, kStop}});
  // A client that hangs up leaves the barrier; the count stays, as torch's does.
  CHECK(run(s, 5, req(Op::barrier, {"c"}, {}, 2)).empty());
  s.forget(5);
  CHECK(s.waits() == 0);
  CHECK(run(s, 6, req(Op::barrier, {"c"}, {}, 2)) == Replies{{6, kStop}});

  std::vector<Outgoing> out;
  auto on_text = req(Op::barrier, {"t"}, {}, 2);
  run(s, 1, req(Op::set, {"t"}, {"x"}));
  CHECK(s.handle(7, on_text, out) == "barrier on key 't', which holds no integer");

  auto listed = run(s, 1, req(Op::list_keys));
  REQUIRE(listed.size() == 1);
  std::string want = i64(4);
  for (const char* k : {"b", "one", "c", "t"}) CHECK(listed[0].second.find(bytes(k)) != std::string::npos);
  CHECK(listed[0].second.substr(0, 8) == want);
  CHECK(listed[0].second.size() == 8 + (8 + 1) + (8 + 3) + (8 + 1) + (8 + 1));
  StoreState small({.max_reply = 20});
  run(small, 1, req(Op::set, {"long key"}, {"v"}));
  auto list = req(Op::list_keys);
  CHECK(small.handle(1, list, out) == "list_keys's reply would be 24 bytes, over 20");
}
