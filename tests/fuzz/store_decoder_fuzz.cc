// libFuzzer target for the c10d store's request decoder: whatever a client sends, the decoder
// neither crashes nor holds more than its limits allow, and cutting the stream anywhere changes
// neither the requests nor the error. The first-bytes classifier is fed the same input.
#include <cstdio>
#include <cstdlib>

#include "store/protocol.h"
#include "tests/support/checks.h"

using namespace dtl::store;

namespace {

uint64_t next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Small limits, so that inputs of a few KiB reach every one of them.
  Limits limits{.max_key = 64, .max_value = 512, .max_keys = 16, .max_request = 2048};
  RequestDecoder whole(limits);
  std::vector<Request> whole_out;
  auto whole_error = whole.feed(data, size, whole_out);
  FUZZ_CHECK(whole.buffered() <= limits.max_request + 8);

  RequestDecoder pieces(limits);
  std::vector<Request> pieces_out;
  std::optional<DecodeError> pieces_error;
  uint64_t state = size * 0x100000001b3ULL + (size ? data[0] : 0);
  for (size_t at = 0; at < size && !pieces_error;) {
    size_t n = std::min<size_t>(size - at, next(state) % 13 + 1);
    pieces_error = pieces.feed(data + at, n, pieces_out);
    FUZZ_CHECK(pieces.buffered() <= limits.max_request + 8);
    at += n;
  }
  FUZZ_CHECK(whole_out == pieces_out);
  FUZZ_CHECK(whole_error == pieces_error);
  FUZZ_CHECK(whole.dialect() == pieces.dialect());
  for (const auto& r : whole_out) {
    FUZZ_CHECK(r.keys.size() <= limits.max_keys + 1);
    for (const auto& k : r.keys) FUZZ_CHECK(k.size() <= limits.max_key);
    for (const auto& v : r.values) FUZZ_CHECK(v.size() <= limits.max_value);
    if (r.op == Op::multi_set) FUZZ_CHECK(r.keys.size() == r.values.size());
  }
  auto verdict = classify(data, size);
  FUZZ_CHECK(size >= 5 ? verdict != Verdict::need_more : true);
  return 0;
}
