#include <catch2/catch.hpp>

#include <string>

#include "store/protocol.h"

using namespace dtl::store;

namespace {

std::vector<uint8_t> unhex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::vector<Request> decode_all(RequestDecoder& d, const std::vector<uint8_t>& bytes, size_t piece = 0) {
  std::vector<Request> out;
  if (piece == 0) piece = bytes.size();
  for (size_t at = 0; at < bytes.size(); at += piece) {
    auto err = d.feed(bytes.data() + at, std::min(piece, bytes.size() - at), out);
    REQUIRE_FALSE(err);
  }
  return out;
}

// Bytes torch 2.15's TCPStore client sent (captured through a proxy): validate, ping, set "/k",
// then get's wait and get.
const char* kTorch215 =
    "00cef7853c" "0dcb610000"
    "0102000000000000002f6b010000000000000076"
    "06010000000000000002000000000000002f6b" "0302000000000000002f6b";

// torch 1.13's: set "/k" "v", wait, get, add "/c" 3, compare_set "/k" v -> w.
const char* kTorch113 =
    "0002000000000000002f6b010000000000000076"
    "05010000000000000002000000000000002f6b" "0202000000000000002f6b"
    "0302000000000000002f630300000000000000"
    "0102000000000000002f6b010000000000000076010000000000000077";

}  // namespace

TEST_CASE("torch 2.15's first bytes are validation, ping, then its requests one code above 1.13's") {
  RequestDecoder d;
  auto bytes = unhex(kTorch215);
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}}) {
    RequestDecoder dec;
    auto reqs = decode_all(dec, bytes, piece);
    REQUIRE(reqs.size() == 5);
    CHECK(dec.dialect() == Dialect::v2);
    CHECK(reqs[0].op == Op::validate);
    CHECK(reqs[1].op == Op::ping);
    CHECK(reqs[1].number == 0x61cb);
    CHECK(reqs[2] == Request{Op::set, {"/k"}, {"v"}, 0});
    CHECK(reqs[3] == Request{Op::wait, {"/k"}, {}, 0});
    CHECK(reqs[4] == Request{Op::get, {"/k"}, {}, 0});
    CHECK(dec.buffered() == 0);
  }
}

TEST_CASE("torch 1.13's first SET is told from 2.x's validation by the four bytes after the zero") {
  for (size_t piece : {size_t{0}, size_t{1}, size_t{2}, size_t{5}}) {
    RequestDecoder dec;
    auto reqs = decode_all(dec, unhex(kTorch113), piece);
    CHECK(dec.dialect() == Dialect::v1);
    REQUIRE(reqs.size() == 5);
    CHECK(reqs[0] == Request{Op::set, {"/k"}, {"v"}, 0});
    CHECK(reqs[1] == Request{Op::wait, {"/k"}, {}, 0});
    CHECK(reqs[2] == Request{Op::get, {"/k"}, {}, 0});
    CHECK(reqs[3] == Request{Op::add, {"/c"}, {}, 3});
    CHECK(reqs[4] == Request{Op::compare_set, {"/k"}, {"v", "w"}, 0});
  }
}

TEST_CASE("multi_set's pairs and a request without fields decode whole") {
  RequestDecoder dec;
  auto reqs = decode_all(dec, unhex("00cef7853c"
                                    "0b020000000000000003000000000000002f6d3101000000000000003103000000000000002f6d32"
                                    "010000000000000032"
                                    "07" "0c"),
                         1);
  REQUIRE(reqs.size() == 4);
  CHECK(reqs[1] == Request{Op::multi_set, {"/m1", "/m2"}, {"1", "2"}, 0});
  CHECK(reqs[2].op == Op::num_keys);
  CHECK(reqs[3].op == Op::cancel_wait);
}

TEST_CASE("the wire's op codes in both dialects, as torch's QueryType numbers them") {
  // torch 2.x's TCPStoreBackend.hpp, written out: no reordering of Op may change them.
  const std::vector<std::pair<int, Op>> v2{
      {0, Op::validate},    {1, Op::set},        {2, Op::compare_set}, {3, Op::get},         {4, Op::add},
      {5, Op::check},       {6, Op::wait},       {7, Op::num_keys},    {8, Op::delete_key},  {9, Op::append},
      {10, Op::multi_get},  {11, Op::multi_set}, {12, Op::cancel_wait}, {13, Op::ping},      {14, Op::queue_push},
      {15, Op::queue_pop},  {16, Op::queue_len}, {17, Op::list_keys},  {18, Op::barrier}};
  for (const auto& [code, op] : v2) {
    INFO(code);
    CHECK(op_for(Dialect::v2, static_cast<uint8_t>(code)) == op);
  }
  CHECK_FALSE(op_for(Dialect::v2, 19));
  // torch 1.13's: SET ... GETNUMKEYS, WATCH_KEY (7, refused), DELETE_KEY
  const std::vector<std::pair<int, Op>> v1{{0, Op::set},   {1, Op::compare_set}, {2, Op::get},     {3, Op::add},
                                           {4, Op::check}, {5, Op::wait},        {6, Op::num_keys}, {8, Op::delete_key}};
  for (const auto& [code, op] : v1) {
    INFO(code);
    CHECK(op_for(Dialect::v1, static_cast<uint8_t>(code)) == op);
  }
  CHECK_FALSE(op_for(Dialect::v1, 7));
  CHECK_FALSE(op_for(Dialect::v1, 9));
}

TEST_CASE("a huge declared length is refused before a byte of it is kept") {
  RequestDecoder dec;
  std::vector<Request> out;
  auto bytes = unhex("00cef7853c" "01ffffffffffffff7f");
  auto err = dec.feed(bytes.data(), bytes.size(), out);
  REQUIRE(err);
  CHECK(err->what.find("key of 9223372036854775807 bytes in set (at most 65536)") != std::string::npos);
  CHECK(dec.buffered() == 0);
  // and it stays failed
  CHECK(dec.feed(bytes.data(), 1, out));
}

TEST_CASE("a value may be as long as the limit, and memory grows only as its bytes arrive") {
  Limits limits;
  limits.max_value = 1 << 20;
  RequestDecoder dec(limits);
  std::vector<Request> out;
  auto head = unhex("00cef7853c" "0101000000000000006b" "0000100000000000");
  REQUIRE_FALSE(dec.feed(head.data(), head.size(), out));
  CHECK(dec.buffered() == 1);  // the key
  std::vector<uint8_t> chunk(1000, 'x');
  REQUIRE_FALSE(dec.feed(chunk.data(), chunk.size(), out));
  CHECK(dec.buffered() == 1001);  // the key and what came of the value
  CHECK(out.size() == 1);         // only the validation so far
}

TEST_CASE("unknown codes, watch_key and a wrong magic are errors") {
  auto fails = [](const std::string& hex) {
    RequestDecoder dec;
    std::vector<Request> out;
    auto bytes = unhex(hex);
    auto err = dec.feed(bytes.data(), bytes.size(), out);
    return err ? err->what : std::string();
  };
  CHECK(fails("00cef7853c" "13") == "unknown query type 19");
  CHECK(fails("07") == "watch_key (torch 1.x) is not supported");
  CHECK(fails("09") == "unknown query type 9");
  CHECK(fails("00cef7853c" "00aabbccdd") == "wrong validation magic number");
}

TEST_CASE("a wait of more keys than allowed is refused") {
  RequestDecoder dec;
  std::vector<Request> out;
  auto bytes = unhex("00cef7853c" "060000100000000000");
  auto err = dec.feed(bytes.data(), bytes.size(), out);
  REQUIRE(err);
  CHECK(err->what == "wait of 1048576 keys (at most 131072)");
}

TEST_CASE("the first five bytes tell a store client from a rendezvous frame") {
  auto v = [](const std::string& hex) {
    auto b = unhex(hex);
    return classify(b.data(), b.size());
  };
  CHECK(v("") == Verdict::need_more);
  CHECK(v("05") == Verdict::store);          // 1.13's wait, check, ...
  CHECK(v("06") == Verdict::store);          // 1.13's num_keys: one byte, then it waits for a reply
  CHECK(v("00cef7") == Verdict::need_more);
  CHECK(v("00cef7853c") == Verdict::store);  // 2.x
  CHECK(v("0002000000") == Verdict::store);  // 1.13's set of a two-byte key
  CHECK(v("0000002c0101") == Verdict::other); // a rendezvous hello: length, version 1, type 1
  CHECK(v("0000ffff01") == Verdict::other);
}

TEST_CASE("torch 2.15's list_keys and barrier: codes 17 and 18, as its client sends them") {
  // Captured through a proxy in front of torch 2.15's own server: store.list_keys(), then
  // store.barrier("bk", 1).
  for (size_t piece : {size_t{0}, size_t{1}}) {
    RequestDecoder dec;
    auto reqs = decode_all(dec, unhex(std::string("00cef7853c") + "11" + "1203000000000000002f626b0100000000000000"), piece);
    REQUIRE(reqs.size() == 3);
    CHECK(reqs[1] == Request{Op::list_keys, {}, {}, 0});
    CHECK(reqs[2] == Request{Op::barrier, {"/bk"}, {}, 1});
  }
}
