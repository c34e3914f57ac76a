#include <catch2/catch.hpp>

#include "store/state.h"

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
