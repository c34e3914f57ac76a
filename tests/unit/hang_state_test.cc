#include <catch2/catch.hpp>

#include "watch/hang_report.h"
#include "watch/hang_state.h"
#include "watch/hang_watch.h"

using namespace dtl::watch;
using namespace std::chrono_literals;

namespace {

const HangClock::time_point t0{};

/// Two ranks sampled every second from t0 to `until` seconds: rank 0 uses `cpu0` of a CPU, rank 1
/// `cpu1`; neither prints after t0. Returns the hangs reported, by the second they came.
std::vector<std::pair<int, Hang>> watch(HangState& w, int from, int until, double cpu0, double cpu1,
                                        HangClock::time_point last_output = t0) {
  std::vector<std::pair<int, Hang>> hangs;
  for (int s = from; s <= until; ++s) {
    std::vector<RankSample> ranks{{0, 0, 100, cpu0 > 0.5 ? 'R' : 'S', cpu0 * s, last_output},
                                  {1, 1, 101, cpu1 > 0.5 ? 'R' : 'S', cpu1 * s, last_output}};
    if (auto h = w.on_sample(t0 + std::chrono::seconds(s), ranks)) hangs.emplace_back(s, *h);
  }
  return hangs;
}

}  // namespace

TEST_CASE("hang watch: ranks that compute quietly are never hung") {
  HangState w(10s);
  CHECK(watch(w, 0, 60, 1.0, 0.9).empty());
}

TEST_CASE("hang watch: ranks busy and quiet for the timeout are for the flight recorder's progress to judge") {
  HangState w(10s);
  CHECK(watch(w, 0, 9, 1.0, 0.9).empty());
  CHECK_FALSE(w.quietly_busy());  // not quiet for the timeout yet
  CHECK(watch(w, 10, 12, 1.0, 0.9).empty());
  CHECK(w.quietly_busy());
  CHECK(watch(w, 13, 13, 1.0, 0.9, t0 + 13s).empty());  // a rank printed
  CHECK_FALSE(w.quietly_busy());
}

TEST_CASE("hang watch: ranks computing on a machine shared three ways are still busy") {
  HangState w(10s);
  CHECK(watch(w, 0, 60, 0.33, 0.3).empty());
}

TEST_CASE("hang watch: no rank printing and none making progress is a hang, reported once") {
  HangState w(10s);
  auto hangs = watch(w, 0, 40, 0.0, 0.0);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].first == 10);
  CHECK(hangs[0].second.quiet_s == Approx(10));
  REQUIRE(hangs[0].second.ranks.size() == 2);
  CHECK_FALSE(hangs[0].second.ranks[0].busy);
  CHECK(hangs[0].second.ranks[1].pid == 101);
}

TEST_CASE("hang watch: one rank spinning while the other waits is a hang, the spinner busy") {
  HangState w(10s);
  auto hangs = watch(w, 0, 20, 0.01, 1.0);
  REQUIRE(hangs.size() == 1);
  CHECK_FALSE(hangs[0].second.ranks[0].busy);
  CHECK(hangs[0].second.ranks[1].busy);
  CHECK(hangs[0].second.ranks[1].cpu_percent == Approx(100));
}

TEST_CASE("hang watch: output ends a hang, and a later silence is a new one") {
  HangState w(5s);
  CHECK(watch(w, 0, 10, 0, 0).size() == 1);
  // a rank printed at second 11: silence counts from there
  auto later = watch(w, 11, 30, 0, 0, t0 + 11s);
  REQUIRE(later.size() == 1);
  CHECK(later[0].first == 16);
}

TEST_CASE("hang watch: the CPU window needs watching first; a reset forgets the attempt") {
  HangState w(10s);
  // quiet since long before the watch began: the first ten seconds of samples tell nothing yet
  std::vector<RankSample> ranks{{0, 0, 100, 'S', 0, t0}};
  CHECK_FALSE(w.on_sample(t0 + 100s, ranks));
  CHECK_FALSE(w.on_sample(t0 + 105s, ranks));
  CHECK(w.on_sample(t0 + 110s, ranks));
  w.reset();
  CHECK_FALSE(w.on_sample(t0 + 111s, ranks));
}

TEST_CASE("hang watch: a signalled hang is reported at once, once an attempt, and silences the silence rule") {
  HangState w(10s);
  // every rank busy: the silence rule never fires
  CHECK(watch(w, 0, 20, 1.0, 2.0).empty());
  std::vector<RankSample> ranks{{0, 0, 100, 'R', 21.0, t0}, {1, 1, 101, 'R', 42.0, t0}};
  auto h = w.on_signal(t0 + 21s, ranks, "rank 0's NCCL watchdog timed out a collective");
  REQUIRE(h);
  CHECK(h->cause == "rank 0's NCCL watchdog timed out a collective");
  REQUIRE(h->ranks.size() == 2);
  CHECK(h->ranks[1].busy);
  CHECK(h->ranks[1].cpu_percent == Approx(200));
  CHECK(h->quiet_s == Approx(21));
  CHECK_FALSE(w.on_signal(t0 + 22s, ranks, "again"));
  // the ranks' own reports of the timeout are output, not the end of the hang
  CHECK(watch(w, 22, 60, 0.0, 0.0, t0 + 22s).empty());
  w.reset();
  CHECK(w.on_signal(t0 + 61s, ranks, "a new attempt's"));
  const auto text = hang_report(*h, std::nullopt, "node-a", "py-spy", 10);
  CHECK(text.starts_with("dtlaunch: hang: rank 0's NCCL watchdog timed out a collective\n"));
}

TEST_CASE("hang watch: exception_dump's value names the rank whose watchdog fired") {
  CHECK(nccl_timeout_cause(std::string("\x03\0\0\0", 4)) ==
        "rank 3's NCCL watchdog timed out a collective (exception_dump in the store)");
  CHECK(nccl_timeout_cause("12").starts_with("rank 12's"));
  CHECK(nccl_timeout_cause("").starts_with("a rank's"));
  CHECK(nccl_timeout_cause("not a rank").starts_with("a rank's"));
}

TEST_CASE("hang watch: ranks runnable most of the window are busy, though a crowded machine gives them little CPU") {
  // 8 ranks importing torch on 2 cores shared with other work: a tenth of a CPU each, but runnable.
  HangState w(10s);
  std::vector<std::pair<int, Hang>> hangs;
  for (int s = 0; s <= 30; ++s) {
    std::vector<RankSample> ranks{{0, 0, 100, 'R', 0.1 * s, t0}, {1, 1, 101, s % 3 ? 'R' : 'S', 0.1 * s, t0}};
    if (auto h = w.on_sample(t0 + std::chrono::seconds(s), ranks)) hangs.emplace_back(s, *h);
  }
  CHECK(hangs.empty());
  // the same CPU, asleep: hung
  HangState asleep(10s);
  CHECK_FALSE(watch(asleep, 0, 30, 0.1, 0.1).empty());
}
