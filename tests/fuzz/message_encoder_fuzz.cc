// libFuzzer target for encode(): messages of any size (long tracebacks, thousands of failures) give
// a frame within kMaxFrameBody that decodes; what fits is kept exactly, what is cut stays valid
// UTF-8, and the root-cause failure always travels.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "rendezvous/protocol.h"
#include "tests/support/checks.h"

using namespace dtl::rendezvous;

namespace {

// Long valid UTF-8 from a few input bytes: a pattern of 1- to 4-byte characters, repeated.
std::string text(FuzzedDataProvider& p, size_t max) {
  static const char* pieces[] = {"a", "\n", "é", "€", "𝄞", "Traceback "};
  std::string pattern;
  for (int n = p.ConsumeIntegralInRange(1, 8); n > 0; --n) pattern += pieces[p.ConsumeIntegralInRange(0, 5)];
  size_t size = p.ConsumeIntegralInRange<size_t>(0, max);
  std::string out;
  while (out.size() < size) out += pattern;
  return out;
}

// A cut text is shorter, valid UTF-8, and starts like the original.
void check_cut(const std::string& original, const std::string& got) {
  FUZZ_CHECK(dtl::test::valid_utf8(got));
  if (got == original) return;
  FUZZ_CHECK(got.size() < original.size());
  size_t head = std::min(got.find('\n'), got.size());
  FUZZ_CHECK(original.compare(0, std::min(head, original.size()), got, 0, head) == 0 || got.find("[... ") != std::string::npos);
}

std::vector<FailureReport> failures(FuzzedDataProvider& p) {
  std::vector<FailureReport> out(p.ConsumeIntegralInRange<size_t>(0, p.ConsumeBool() ? 4 : 3000));
  int32_t rank = 0;
  for (auto& f : out) {
    f.rank = rank++;
    f.pid = p.ConsumeIntegral<int32_t>();
    f.exitcode = p.ConsumeIntegral<int32_t>();
    f.observed_ns = p.ConsumeIntegralInRange<int64_t>(0, 1000);
    f.host = text(p, 5000);
    f.error_file = text(p, 5000);
    f.message = text(p, p.ConsumeBool() ? 600 : 100000);
  }
  return out;
}

void check_failures(const std::vector<FailureReport>& sent, const std::vector<FailureReport>& got) {
  FUZZ_CHECK(got.size() <= sent.size());
  if (!sent.empty()) {
    FUZZ_CHECK(!got.empty());
    auto root = *std::min_element(sent.begin(), sent.end(), [](const auto& a, const auto& b) {
      return a.observed_ns != b.observed_ns ? a.observed_ns < b.observed_ns : a.rank < b.rank;
    });
    FUZZ_CHECK(std::any_of(got.begin(), got.end(), [&](const auto& f) { return f.rank == root.rank; }));
  }
  int32_t last = -1;
  for (const auto& f : got) {
    FUZZ_CHECK(f.rank > last && f.rank < static_cast<int32_t>(sent.size()));  // sent order kept
    last = f.rank;
    const auto& s = sent[f.rank];
    FUZZ_CHECK(f.pid == s.pid && f.exitcode == s.exitcode && f.observed_ns == s.observed_ns);
    check_cut(s.host, f.host);
    check_cut(s.error_file, f.error_file);
    check_cut(s.message, f.message);
    FUZZ_CHECK(f.host.size() <= kMaxName && f.error_file.size() <= kMaxName);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Message m;
  switch (p.ConsumeIntegralInRange(0, 4)) {
    case 0: m = Failed{failures(p)}; break;
    case 1: {
      Exit e{p.ConsumeIntegral<int32_t>(), text(p, 100000), {}};
      e.failures = failures(p);
      m = e;
      break;
    }
    case 2: m = Refused{text(p, 100000)}; break;
    case 3: m = Join{Bytes(p.ConsumeIntegralInRange<size_t>(0, 100)), text(p, 6000), text(p, 6000), 1, -1, 0, 0, 1, 1, 0}; break;
    default: m = Hello{text(p, 6000), {}}; break;
  }
  Bytes frame = encode(m);
  FUZZ_CHECK(frame.size() <= 4 + kMaxFrameBody);
  auto decoded = decode_body(frame.data() + 4, frame.size() - 4);
  if (auto* e = std::get_if<DecodeError>(&decoded)) {
    std::fprintf(stderr, "decode error: %s\n", e->what.c_str());
    std::abort();
  }
  const Message& got = std::get<Message>(decoded);
  FUZZ_CHECK(got.index() == m.index());
  if (frame.size() < 4 + kMaxFrameBody - 64 && std::holds_alternative<Refused>(m)) FUZZ_CHECK(got == m);
  if (auto* f = std::get_if<Failed>(&m)) check_failures(f->failures, std::get<Failed>(got).failures);
  if (auto* e = std::get_if<Exit>(&m)) {
    const auto& g = std::get<Exit>(got);
    FUZZ_CHECK(g.code == e->code);
    check_cut(e->reason, g.reason);
    check_failures(e->failures, g.failures);
  }
  if (auto* r = std::get_if<Refused>(&m)) check_cut(r->reason, std::get<Refused>(got).reason);
  if (auto* j = std::get_if<Join>(&m)) {
    const auto& g = std::get<Join>(got);
    check_cut(j->host, g.host);
    check_cut(j->addr, g.addr);
    FUZZ_CHECK(g.proof.size() == std::min(j->proof.size(), kMaxProof));
  }
  if (auto* h = std::get_if<Hello>(&m)) check_cut(h->run_id, std::get<Hello>(got).run_id);
  return 0;
}
