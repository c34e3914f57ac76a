#include <catch2/catch.hpp>

#include "launcher/line_groups.h"

using namespace dtl::launcher;
using namespace std::chrono_literals;

namespace {

LineGroups::Clock::time_point at(int ms) { return LineGroups::Clock::time_point(std::chrono::milliseconds(ms)); }

LineGroups with_ranks(int n, std::chrono::milliseconds window = 500ms) {
  LineGroups g(window);
  for (int r = 0; r < n; ++r) g.expect(r);
  return g;
}

}  // namespace

TEST_CASE("a line every rank says goes out once, at once, led by their ranks") {
  auto g = with_ranks(8);
  std::string out;
  for (int r = 7; r >= 1; --r) g.add(r, "epoch 1\n", at(r), out);
  CHECK(out.empty());
  g.add(0, "epoch 1\n", at(9), out);
  CHECK(out == "[ranks 0-7]:epoch 1\n");
  CHECK_FALSE(g.due(at(10), out));
}

TEST_CASE("a line only some ranks say waits its window, then names those ranks") {
  auto g = with_ranks(4);
  std::string out;
  g.add(0, "loss 2.5\n", at(0), out);
  g.add(2, "loss 2.5\n", at(100), out);
  g.add(3, "warning: slow disk\n", at(200), out);
  CHECK(out.empty());
  CHECK(g.due(at(499), out) == at(500));
  CHECK(out.empty());
  CHECK(g.due(at(500), out) == at(700));
  CHECK(out == "[ranks 0,2]:loss 2.5\n");
  CHECK_FALSE(g.due(at(700), out));
  CHECK(out == "[ranks 0,2]:loss 2.5\n[rank 3]:warning: slow disk\n");
}

TEST_CASE("each rank's lines keep their order, even when a later line of it could join an earlier copy") {
  auto g = with_ranks(2);
  std::string out;
  g.add(0, "x\n", at(0), out);
  g.add(1, "y\n", at(1), out);
  g.add(1, "x\n", at(2), out);  // rank 0's x waits behind rank 1's y, and goes out with rank 1's x
  g.add(0, "y\n", at(3), out);  // rank 1's y goes out before its x, rank 0's y after its x: apart
  CHECK(out.empty());
  g.flush(out);
  CHECK(out == "[rank 1]:y\n[ranks 0-1]:x\n[rank 0]:y\n");
}

TEST_CASE("a line every rank says after lines of its own goes out once, after each rank's own") {
  auto g = with_ranks(3);
  std::string out;
  for (int r : {2, 0, 1}) {
    g.add(r, "shard " + std::to_string(r) + "\n", at(r), out);
    g.add(r, "step done\n", at(r), out);
  }
  CHECK(out.empty());  // every rank's shard line waits for copies that will not come
  g.due(at(600), out);
  CHECK(out == "[rank 2]:shard 2\n[rank 0]:shard 0\n[rank 1]:shard 1\n[ranks 0-2]:step done\n");
}

TEST_CASE("a rank that says one line twice is two lines, each grouped with the others' copies in turn") {
  auto g = with_ranks(2);
  std::string out;
  g.add(0, "tick\n", at(0), out);
  g.add(0, "tick\n", at(1), out);
  g.add(1, "tick\n", at(2), out);
  CHECK(out == "[ranks 0-1]:tick\n");
  g.add(1, "tick\n", at(3), out);
  CHECK(out == "[ranks 0-1]:tick\n[ranks 0-1]:tick\n");
}

TEST_CASE("a complete line behind a waiting one keeps its place in the output") {
  auto g = with_ranks(2);
  std::string out;
  g.add(0, "only rank 0\n", at(0), out);
  g.add(0, "both\n", at(10), out);
  g.add(1, "both\n", at(20), out);
  CHECK(out.empty());  // rank 0's first line comes first
  g.due(at(500), out);
  CHECK(out == "[rank 0]:only rank 0\n[ranks 0-1]:both\n");
}

TEST_CASE("a rank whose stream ended is not waited for") {
  auto g = with_ranks(3);
  std::string out;
  g.add(0, "done\n", at(0), out);
  g.add(1, "done\n", at(1), out);
  g.gone(2, out);
  CHECK(out == "[ranks 0-1]:done\n");
}

TEST_CASE("past the bound of held bytes the oldest lines go out without waiting") {
  LineGroups g(500ms, 10);
  g.expect(0);
  g.expect(1);
  std::string out;
  g.add(0, "12345\n", at(0), out);
  CHECK(out.empty());
  g.add(0, "abcdef\n", at(1), out);
  CHECK(out == "[rank 0]:12345\n");
}

TEST_CASE("lines differing only in their end are different lines, and progress pieces keep their \\r") {
  auto g = with_ranks(2);
  std::string out;
  g.add(0, " 10%\r", at(0), out);
  g.add(1, " 10%\n", at(0), out);
  g.flush(out);
  CHECK(out == "[rank 0]: 10%\r[rank 1]: 10%\n");
}

TEST_CASE("one rank alone never waits") {
  auto g = with_ranks(1);
  std::string out;
  g.add(0, "hello\n", at(0), out);
  CHECK(out == "[rank 0]:hello\n");
}

TEST_CASE("the lead names ranks as ranges") {
  CHECK(LineGroups::label({3}) == "[rank 3]:");
  CHECK(LineGroups::label({0, 1, 2, 5, 7, 8}) == "[ranks 0-2,5,7-8]:");
}
