#include <catch2/catch.hpp>

#include <string>

#include "rendezvous/protocol.h"
#include "tests/support/checks.h"

using namespace dtl::rendezvous;

namespace {

Nonce counting_nonce(uint8_t start) {
  Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(start + i);
  return n;
}

std::vector<FailureReport> sample_failures() {
  return {FailureReport{5, 1, 4242, -11, 1700000000123456789, 1700000000, "node-b", "<N/A>",
                        "Signal 11 (SIGSEGV) received by PID 4242"},
          FailureReport{6, 2, 4243, 3, 1700000000223456789, 1700000001, "node-b", "/tmp/logs/2/error.json",
                        "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: bad"}};
}

// One of each message type, every field away from its default.
std::vector<Message> samples() {
  return {
      Hello{"job42", counting_nonce(1)},
      Challenge{counting_nonce(200), Bytes(32, 0xab)},
      Join{Bytes(32, 0x5c), "node-a.example", "10.0.0.7", 8, 3, 29501, 2, 2, 4, 0xfedcba9876543210ULL},
      Refused{"node_rank 3 is already taken by node-b (10.0.0.8)"},
      Round{0x80000001u, 2, 4, 16, 32, "10.0.0.1", 29500, 1},
      Heartbeat{},
      Failed{sample_failures()},
      Stop{"worker 5 on node-b failed"},
      Stopped{},
      Done{},
      Exit{139, "worker 5 on node-b failed: no restarts left", sample_failures()},
      Leaving{"it received SIGTERM"},
      StacksWanted{7, 1},
      StacksAsk{0xfffffffeu, kGatherRanks},
      StacksPart{7, R"({"host": "node-b", "ranks": []})"},
      StacksEnd{7, "node-c (10.0.0.9) (gone)"},
      HangVerdict{5, "hang: no rank printed for 600 s (suspect: blocked)"},
  };
}

Bytes body_of(const Bytes& frame) { return Bytes(frame.begin() + 4, frame.end()); }

Bytes stream_of(const std::vector<Message>& ms) {
  Bytes out;
  for (const auto& m : ms) {
    Bytes f = encode(m);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

Message decode_ok(const Bytes& body) {
  auto r = decode_body(body.data(), body.size());
  if (auto* e = std::get_if<DecodeError>(&r)) FAIL("unexpected decode error: " << e->what);
  return std::get<Message>(r);
}

std::string error_of(const Bytes& body) {
  auto r = decode_body(body.data(), body.size());
  if (auto* e = std::get_if<DecodeError>(&r)) return e->what;
  return "(decoded a " + std::string(message_name(std::get<Message>(r))) + ")";
}

std::string frame_error_of(const Bytes& bytes) {
  FrameDecoder d;
  std::vector<Message> out;
  auto e = d.feed(bytes.data(), bytes.size(), out);
  return e ? e->what : "(no error)";
}

// Builds bodies by hand, for what encode() would never write.
struct Body {
  Bytes b{kProtocolVersion};
  explicit Body(uint8_t type) { b.push_back(type); }
  Body& u32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
    return *this;
  }
  Body& i32(int32_t v) { return u32(static_cast<uint32_t>(v)); }
  Body& i64(int64_t v) { return u32(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32)).u32(static_cast<uint32_t>(v)); }
  Body& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Body& raw(size_t n, uint8_t fill = 0) {
    b.insert(b.end(), n, fill);
    return *this;
  }
};

constexpr uint8_t kHello = 1, kChallenge = 2, kJoin = 3, kFailed = 7;

Join valid_join() { return std::get<Join>(samples()[2]); }
Round valid_round() { return std::get<Round>(samples()[4]); }

std::string join_error(Join j) { return error_of(body_of(encode(j))); }
std::string round_error(Round r) { return error_of(body_of(encode(r))); }

}  // namespace

TEST_CASE("every message type survives an encode and decode round trip unchanged") {
  for (const auto& m : samples()) {
    INFO(message_name(m));
    Bytes frame = encode(m);
    REQUIRE(frame.size() >= 6);
    uint32_t length = uint32_t{frame[0]} << 24 | uint32_t{frame[1]} << 16 | uint32_t{frame[2]} << 8 | frame[3];
    CHECK(length == frame.size() - 4);
    CHECK(frame[4] == kProtocolVersion);
    CHECK(frame[5] == type_code(m));
    CHECK(decode_ok(body_of(frame)) == m);

    FrameDecoder d;
    std::vector<Message> out;
    CHECK_FALSE(d.feed(frame.data(), frame.size(), out));
    REQUIRE(out.size() == 1);
    CHECK(out[0] == m);
    CHECK(d.buffered() == 0);
  }
}

TEST_CASE("the wire's type codes, each message's for ever") {
  // Written out, not derived: a message inserted into Message must not renumber the wire.
  const std::vector<std::pair<Message, int>> codes{
      {Hello{}, 1},  {Challenge{}, 2}, {Join{}, 3},    {Refused{}, 4}, {Round{}, 5}, {Heartbeat{}, 6},
      {Failed{}, 7}, {Stop{}, 8},      {Stopped{}, 9}, {Done{}, 10},   {Exit{}, 11}, {Leaving{}, 12},
      {StacksWanted{}, 13}, {StacksAsk{}, 14}, {StacksPart{}, 15}, {StacksEnd{}, 16}, {HangVerdict{}, 17}};
  REQUIRE(codes.size() == std::variant_size_v<Message>);
  for (const auto& [m, code] : codes) {
    INFO(message_name(m));
    CHECK(type_code(m) == code);
    CHECK(encode(m)[5] == code);
  }
}

TEST_CASE("stacks messages: a part too long for a frame is cut, a bad hang flag or rank refused") {
  const std::string long_part(2 * kMaxFrameBody, 'x');
  const Bytes frame = encode(StacksPart{3, long_part});
  CHECK(frame.size() <= kMaxFrameBody + 4);
  auto m = std::get<StacksPart>(decode_ok(body_of(frame)));
  CHECK(m.id == 3);
  CHECK(m.part.size() <= kMaxStacksText);
  CHECK(m.part.find("bytes cut") != std::string::npos);
  CHECK(error_of(body_of(encode(StacksWanted{1, 3}))) == "stacks_wanted message: kind must be in 0..2 (got 3)");
  CHECK(error_of(body_of(encode(StacksAsk{1, 7}))) == "stacks_ask message: kind must be in 0..2 (got 7)");
  CHECK(error_of(body_of(encode(HangVerdict{-1, ""}))) == "hang_verdict message: rank must be >= 0 (got -1)");
}

TEST_CASE("message names are the lowercase type names used in logs") {
  std::vector<std::string> names;
  for (const auto& m : samples()) names.push_back(message_name(m));
  CHECK(names == std::vector<std::string>{"hello", "challenge", "join", "refused", "round", "heartbeat", "failed",
                                          "stop", "stopped", "done", "exit", "leaving", "stacks_wanted",
                                          "stacks_ask", "stacks_part", "stacks_end", "hang_verdict"});
}

TEST_CASE("a stream split at any byte boundary decodes to the same messages") {
  auto messages = samples();
  Bytes stream = stream_of(messages);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameDecoder d;
    std::vector<Message> out;
    REQUIRE_FALSE(d.feed(stream.data(), cut, out));
    REQUIRE_FALSE(d.feed(stream.data() + cut, stream.size() - cut, out));
    REQUIRE(out == messages);
    REQUIRE(d.buffered() == 0);
  }
}

TEST_CASE("a stream fed one byte at a time decodes to the same messages") {
  auto messages = samples();
  Bytes stream = stream_of(messages);
  FrameDecoder d;
  std::vector<Message> out;
  size_t most_buffered = 0;
  for (uint8_t byte : stream) {
    REQUIRE_FALSE(d.feed(&byte, 1, out));
    most_buffered = std::max(most_buffered, d.buffered());
  }
  CHECK(out == messages);
  CHECK(d.buffered() == 0);
  CHECK(most_buffered < 400);
}

TEST_CASE("several frames in one feed all come out, in order") {
  std::vector<Message> messages{Heartbeat{}, Done{}, Stop{"a"}, Heartbeat{}, Refused{"b"}};
  Bytes stream = stream_of(messages);
  FrameDecoder d;
  std::vector<Message> out{Stopped{}};  // what was there is kept
  CHECK_FALSE(d.feed(stream.data(), stream.size(), out));
  REQUIRE(out.size() == 6);
  CHECK(std::vector<Message>(out.begin() + 1, out.end()) == messages);
}

TEST_CASE("feeding nothing is harmless") {
  FrameDecoder d;
  std::vector<Message> out;
  CHECK_FALSE(d.feed(nullptr, 0, out));
  CHECK(out.empty());
}

TEST_CASE("frame lengths of zero or over the limit are refused before anything is allocated") {
  CHECK(frame_error_of({0, 0, 0, 0}) == "empty frame (body length 0)");
  CHECK(frame_error_of({0, 1, 0x11, 0x70}) == "frame body of 70000 bytes exceeds the 65536-byte limit");
  CHECK(frame_error_of({0, 1, 0, 1}) == "frame body of 65537 bytes exceeds the 65536-byte limit");
  CHECK(frame_error_of({0xff, 0xff, 0xff, 0xff, 1, 6}) ==
        "frame body of 4294967295 bytes exceeds the 65536-byte limit");

  FrameDecoder d;
  std::vector<Message> out;
  Bytes huge{0xff, 0xff, 0xff, 0xff};
  REQUIRE(d.feed(huge.data(), huge.size(), out));
  CHECK(d.buffered() == 4);
}

TEST_CASE("a decoder stays failed after an error, and keeps the messages before it") {
  Bytes stream = stream_of({Heartbeat{}, Done{}});
  Bytes bad = encode(Heartbeat{});
  bad[4] = 9;  // version
  stream.insert(stream.end(), bad.begin(), bad.end());
  Bytes more = encode(Stopped{});
  stream.insert(stream.end(), more.begin(), more.end());

  FrameDecoder d;
  std::vector<Message> out;
  auto e = d.feed(stream.data(), stream.size(), out);
  REQUIRE(e);
  CHECK(e->what == "unsupported protocol version 9");
  CHECK(out == std::vector<Message>{Heartbeat{}, Done{}});

  out.clear();
  Bytes good = encode(Done{});
  auto again = d.feed(good.data(), good.size(), out);
  REQUIRE(again);
  CHECK(again->what == "unsupported protocol version 9");
  CHECK(out.empty());
}

TEST_CASE("bodies with a bad version or type are refused by name") {
  CHECK(error_of({2, 6}) == "unsupported protocol version 2");
  CHECK(error_of({0}) == "unsupported protocol version 0");
  CHECK(error_of({1}) == "frame body of 1 byte has no message type");
  CHECK(error_of({1, 0}) == "unknown message type 0");
  CHECK(error_of({1, 18}) == "unknown message type 18");
  CHECK(error_of({1, 255}) == "unknown message type 255");
  CHECK(error_of({}) == "empty frame (body length 0)");
  CHECK(error_of(Bytes(kMaxFrameBody + 1, 1)) == "frame body of 65537 bytes exceeds the 65536-byte limit");
}

TEST_CASE("truncated payloads name the field that is missing") {
  CHECK(error_of(Body(kHello).raw(2).b) == "hello message truncated: run_id needs 4 bytes, 2 left");
  Bytes join = body_of(encode(valid_join()));
  join.resize(join.size() - 3);
  CHECK(error_of(join) == "join message truncated: agent_id needs 4 bytes, 1 left");
  Bytes round = body_of(encode(valid_round()));
  round.resize(4);
  CHECK(error_of(round) == "round message truncated: round needs 4 bytes, 2 left");
  // Every proper prefix of every sample is refused.
  for (const auto& m : samples()) {
    Bytes body = body_of(encode(m));
    for (size_t n = 2; n < body.size(); ++n) {
      INFO(message_name(m) << " cut to " << n);
      CHECK(std::holds_alternative<DecodeError>(decode_body(body.data(), n)));
    }
  }
}

TEST_CASE("bytes after a complete payload are refused") {
  Bytes hb = body_of(encode(Heartbeat{}));
  hb.push_back(0);
  CHECK(error_of(hb) == "heartbeat message has 1 trailing byte");
  Bytes join = body_of(encode(valid_join()));
  join.insert(join.end(), {1, 2, 3});
  CHECK(error_of(join) == "join message has 3 trailing bytes");
}

TEST_CASE("string and list lengths beyond the bytes left are refused") {
  CHECK(error_of(Body(kHello).u32(1000).raw(12).b) == "hello message: run_id of 1000 bytes exceeds the 12 bytes left");
  CHECK(error_of(Body(kHello).u32(0xffffffff).b) ==
        "hello message: run_id of 4294967295 bytes exceeds the 0 bytes left");
  CHECK(error_of(Body(kFailed).u32(1000).raw(20).b) == "failed message: 1000 failures need at least 44000 bytes, 20 left");
  CHECK(error_of(Body(kFailed).u32(0xffffffff).b) ==
        "failed message: 4294967295 failures need at least 188978560980 bytes, 0 left");
  CHECK(error_of(Body(kFailed).u32(1).raw(32).str("node-b").u32(0).b) ==
        "failed message truncated: message needs 4 bytes, 0 left");
}

TEST_CASE("names over the length limit are refused") {
  CHECK(error_of(Body(kHello).str(std::string(kMaxName + 1, 'a')).b) ==
        "hello message: run_id of 4097 bytes exceeds the 4096-byte limit");
}

TEST_CASE("nonces of the wrong size and proofs over 64 bytes are refused") {
  CHECK(error_of(Body(kHello).str("job").u32(16).raw(16).b) == "hello message: nonce must be 32 bytes (got 16)");
  CHECK(error_of(Body(kChallenge).u32(33).raw(33).u32(0).b) == "challenge message: nonce must be 32 bytes (got 33)");
  CHECK(error_of(Body(kChallenge).u32(32).raw(32).u32(65).raw(65).b) ==
        "challenge message: proof of 65 bytes exceeds the 64-byte limit");
  CHECK(error_of(Body(kJoin).u32(65).raw(65).b) == "join message: proof of 65 bytes exceeds the 64-byte limit");
}

TEST_CASE("a NUL byte in a run id, host or address is refused") {
  std::string nul("node\0evil", 9);
  CHECK(error_of(body_of(encode(Hello{nul, {}}))) == "hello message: run_id contains a NUL byte");
  Join j = valid_join();
  j.host = nul;
  CHECK(join_error(j) == "join message: host contains a NUL byte");
  j = valid_join();
  j.addr = nul;
  CHECK(join_error(j) == "join message: addr contains a NUL byte");
  Round r = valid_round();
  r.master_addr = nul;
  CHECK(round_error(r) == "round message: master_addr contains a NUL byte");
}

TEST_CASE("join fields out of range are refused with the value") {
  Join j = valid_join();
  j.nproc = 0;
  CHECK(join_error(j) == "join message: nproc must be in 1..65536 (got 0)");
  j.nproc = 65537;
  CHECK(join_error(j) == "join message: nproc must be in 1..65536 (got 65537)");
  j.nproc = 65536;
  CHECK(std::holds_alternative<Join>(decode_ok(body_of(encode(j)))));

  j = valid_join();
  j.node_rank = -2;
  CHECK(join_error(j) == "join message: node_rank must be >= -1 (got -2)");
  j.node_rank = -1;
  CHECK(std::holds_alternative<Join>(decode_ok(body_of(encode(j)))));

  j = valid_join();
  j.min_nodes = 0;
  j.max_nodes = 0;
  CHECK(join_error(j) == "join message: min_nodes must be >= 1 (got 0)");
  j.min_nodes = 3;
  j.max_nodes = 2;
  CHECK(join_error(j) == "join message: max_nodes (2) must be >= min_nodes (3)");

  j = valid_join();
  j.worker_port = 65536;
  CHECK(join_error(j) == "join message: worker_port must be in 0..65535 (got 65536)");
  j = valid_join();
  j.max_restarts = -1;
  CHECK(join_error(j) == "join message: max_restarts must be >= 0 (got -1)");
}

TEST_CASE("round fields out of range are refused with the value") {
  Round r = valid_round();
  r.group_world_size = 0;
  CHECK(round_error(r) == "round message: group_world_size must be >= 1 (got 0)");
  r = valid_round();
  r.group_rank = 4;
  CHECK(round_error(r) == "round message: group_rank must be in 0..3 (got 4)");
  r = valid_round();
  r.base_rank = -1;
  CHECK(round_error(r) == "round message: base_rank must be in 0..31 (got -1)");
  r = valid_round();
  r.world_size = 0;
  CHECK(round_error(r) == "round message: world_size must be >= 1 (got 0)");
  r = valid_round();
  r.master_port = 70000;
  CHECK(round_error(r) == "round message: master_port must be in 0..65535 (got 70000)");
  r = valid_round();
  r.restart_count = -1;
  CHECK(round_error(r) == "round message: restart_count must be >= 0 (got -1)");
}

TEST_CASE("a reason that exactly fills a frame is kept whole, one byte more is cut") {
  std::string fits(kMaxFrameBody - 2 - 4, 'x');
  Bytes frame = encode(Refused{fits});
  CHECK(frame.size() == 4 + kMaxFrameBody);
  CHECK(std::get<Refused>(decode_ok(body_of(frame))).reason == fits);

  Bytes over = encode(Refused{fits + "y"});
  CHECK(over.size() <= 4 + kMaxFrameBody);
  std::string got = std::get<Refused>(decode_ok(body_of(over))).reason;
  CHECK(got.size() < fits.size());
  CHECK_THAT(got, Catch::Contains("[... ") && Catch::EndsWith("xy"));
}

TEST_CASE("oversized tracebacks are cut to fit the frame, keeping head and tail of each") {
  Exit exit{1, "worker 0 failed", {}};
  for (int i = 0; i < 3; ++i) {
    std::string tb = "Traceback (most recent call last):\n" + std::string(50000, 'a' + i) + "\nValueError: " +
                     std::to_string(i);
    exit.failures.push_back(FailureReport{i, i, 100 + i, 1, i, 0, "node-" + std::to_string(i), "/e.json", tb});
  }
  Bytes frame = encode(exit);
  CHECK(frame.size() <= 4 + kMaxFrameBody);
  CHECK(frame.size() > kMaxFrameBody - 64);  // the room is used, not wasted
  Exit got = std::get<Exit>(decode_ok(body_of(frame)));
  CHECK(got.code == 1);
  CHECK(got.reason == "worker 0 failed");  // short texts stay whole
  REQUIRE(got.failures.size() == 3);
  for (int i = 0; i < 3; ++i) {
    const auto& m = got.failures[i].message;
    CHECK_THAT(m, Catch::StartsWith("Traceback (most recent call last):"));
    CHECK_THAT(m, Catch::EndsWith("ValueError: " + std::to_string(i)));
    CHECK_THAT(m, Catch::Contains(" bytes cut ...]"));
    CHECK(got.failures[i].host == exit.failures[i].host);
  }
}

TEST_CASE("too many failures for one frame keep the earliest observed, in their order") {
  Failed failed;
  for (int i = 0; i < 5000; ++i) {
    // Observed times run backwards: the last one listed is the root cause.
    failed.failures.push_back(FailureReport{i, i % 8, 1000 + i, 1, 10000 - i, 0, "host", "<N/A>", "exit 1"});
  }
  Bytes frame = encode(failed);
  CHECK(frame.size() <= 4 + kMaxFrameBody);
  Failed got = std::get<Failed>(decode_ok(body_of(frame)));
  REQUIRE(got.failures.size() > 1000);
  REQUIRE(got.failures.size() < 5000);
  CHECK(got.failures.back() == failed.failures.back());
  for (size_t i = 1; i < got.failures.size(); ++i) CHECK(got.failures[i - 1].rank < got.failures[i].rank);
}

TEST_CASE("long names are cut to the name limit so the frame stays valid") {
  Join j = valid_join();
  j.host = std::string(10000, 'h');
  Join got = std::get<Join>(decode_ok(body_of(encode(j))));
  CHECK(got.host.size() <= kMaxName);
  CHECK_THAT(got.host, Catch::StartsWith("hhhh") && Catch::EndsWith("hhhh"));
  j.proof = Bytes(100, 7);
  CHECK(std::get<Join>(decode_ok(body_of(encode(j)))).proof == Bytes(kMaxProof, 7));
}

TEST_CASE("cutting a text never splits a UTF-8 character") {
  std::string text;
  while (text.size() < 100000) text += "é€𝄞";
  std::string got = std::get<Stop>(decode_ok(body_of(encode(Stop{text})))).reason;
  CHECK(got.size() <= kMaxFrameBody - 6);
  CHECK(dtl::test::valid_utf8(got));
}

TEST_CASE("the decoder holds at most one partial frame, and only what has arrived") {
  Bytes frame = encode(Refused{std::string(kMaxFrameBody - 6, 'r')});
  FrameDecoder d;
  std::vector<Message> out;
  REQUIRE_FALSE(d.feed(frame.data(), 1004, out));
  CHECK(d.buffered() == 1004);
  REQUIRE_FALSE(d.feed(frame.data() + 1004, frame.size() - 1005, out));
  CHECK(d.buffered() == frame.size() - 1);
  CHECK(out.empty());
  REQUIRE_FALSE(d.feed(frame.data() + frame.size() - 1, 1, out));
  CHECK(d.buffered() == 0);
  CHECK(out.size() == 1);
}
