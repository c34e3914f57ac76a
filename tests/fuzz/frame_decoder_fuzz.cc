// libFuzzer target for the rendezvous frame decoder: whatever a peer sends, the decoder neither
// crashes nor over-allocates, cutting the stream anywhere changes nothing, and whatever it accepts
// re-encodes to the same bytes.
#include <cstdio>
#include <cstdlib>

#include "rendezvous/protocol.h"
#include "tests/support/checks.h"

using namespace dtl::rendezvous;

namespace {

// Piece sizes from the input itself, so libFuzzer explores cut points as it mutates.
uint64_t mix(const uint8_t* data, size_t size) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ size;
  for (size_t i = 0; i < size && i < 64; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h;
}

uint64_t next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void check_reencodes(const Message& m) {
  Bytes frame = encode(m);
  FUZZ_CHECK(frame.size() >= 6 && frame.size() <= 4 + kMaxFrameBody);
  FrameDecoder again;
  std::vector<Message> out;
  FUZZ_CHECK(!again.feed(frame.data(), frame.size(), out));
  FUZZ_CHECK(out.size() == 1 && out[0] == m);
  FUZZ_CHECK(again.buffered() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The whole input as one read, and again in random-sized pieces: same messages, same error.
  FrameDecoder whole;
  std::vector<Message> whole_out;
  auto whole_error = whole.feed(data, size, whole_out);
  FUZZ_CHECK(whole.buffered() <= 4 + kMaxFrameBody);

  FrameDecoder pieces;
  std::vector<Message> pieces_out;
  std::optional<DecodeError> pieces_error;
  uint64_t state = mix(data, size);
  for (size_t at = 0; at < size && !pieces_error;) {
    size_t n = std::min<size_t>(size - at, next(state) % 67 + 1);
    pieces_error = pieces.feed(data + at, n, pieces_out);
    FUZZ_CHECK(pieces.buffered() <= 4 + kMaxFrameBody);
    at += n;
  }
  FUZZ_CHECK(whole_out == pieces_out);
  FUZZ_CHECK(whole_error == pieces_error);
  if (!whole_error) FUZZ_CHECK(whole.buffered() == pieces.buffered());
  for (const auto& m : whole_out) check_reencodes(m);

  // The input as one frame body: accepted bodies are exactly what encode() writes.
  auto body = decode_body(data, size);
  if (const auto* m = std::get_if<Message>(&body)) {
    Bytes frame = encode(*m);
    FUZZ_CHECK(frame.size() == size + 4);
    FUZZ_CHECK(std::equal(frame.begin() + 4, frame.end(), data));
    check_reencodes(*m);
  } else {
    FUZZ_CHECK(!std::get<DecodeError>(body).what.empty());
  }
  return 0;
}
