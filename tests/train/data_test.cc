#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "apps/dtl-train/data.h"
#include "apps/dtl-train/schedule.h"

using namespace dtl::train;

TEST_CASE("dtl-train: the rows of a step are the same whatever the world size and accumulation") {
  const long long global = 8;
  for (Batching b : {Batching{8, 1, 1}, Batching{4, 1, 2}, Batching{2, 1, 4}, Batching{2, 2, 2}, Batching{1, 8, 1}}) {
    REQUIRE(b.global() == global);
    std::set<long long> rows;
    for (int rank = 0; rank < b.world_size; ++rank)
      for (int micro = 0; micro < b.grad_accum; ++micro)
        for (int row = 0; row < b.batch_size; ++row) rows.insert(global_row(b, rank, micro, row));
    CHECK(rows.size() == global);
    CHECK(*rows.begin() == 0);
    CHECK(*rows.rbegin() == global - 1);
  }
  // K=2 with half the batch keeps each rank's block: rank 1 holds rows 4..7 either way.
  CHECK(global_row({4, 1, 2}, 1, 0, 0) == 4);
  CHECK(global_row({2, 2, 2}, 1, 1, 1) == 7);
}

TEST_CASE("dtl-train: synthetic samples depend only on the seed and the sample number") {
  SyntheticTokens a(7, 256), b(7, 256), c(8, 256);
  std::vector<int64_t> x(33), y(33), z(33);
  a.sample(1234, x);
  b.sample(1234, y);
  c.sample(1234, z);
  CHECK(x == y);
  CHECK(x != z);
  for (auto t : x) CHECK((t >= 0 && t < 256));
  a.sample(1235, y);
  CHECK(x != y);
}

TEST_CASE("dtl-train: a text file is cut into windows visited once per epoch in a seeded order") {
  auto path = std::filesystem::temp_directory_path() / "dtl-train-data-test.txt";
  std::string text;
  for (int i = 0; i < 10; ++i) text += std::string(4, static_cast<char>('a' + i));  // 40 bytes
  std::ofstream(path) << text;
  TextTokens t(path.string(), 4, 1);  // windows of 5 bytes every 4: (40 - 1) / 4 = 9
  REQUIRE(t.size() == 9);
  std::set<std::string> seen;
  std::vector<int64_t> w(5);
  for (long long s = 0; s < 9; ++s) {
    t.sample(s, w);
    seen.insert(std::string(w.begin(), w.end()));
  }
  CHECK(seen.size() == 9);
  CHECK(seen.count("aaaab") == 1);
  t.sample(9, w);  // the second epoch starts again
  CHECK(seen.count(std::string(w.begin(), w.end())) == 1);
  CHECK(check_data_fits(t, {1, 1, 8}, 4) == "");
  CHECK(check_data_fits(t, {1, 1, 10}, 4) == "data file '" + path.string() +
                                                 "' (40 bytes, 9 sequences of 5 bytes) has fewer sequences than the 10 ranks");
  CHECK(check_data_fits(t, {4, 1, 3}, 4) ==
        "data file '" + path.string() +
            "' (40 bytes, 9 sequences of 5 bytes) has fewer sequences than one global batch of 12 (3 ranks x "
            "--batch_size 4 x --grad_accum 1)");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(TextTokens(path.string(), 4, 1), "cannot read data file '" + path.string() + "'");
}

TEST_CASE("dtl-train: the learning rate warms up linearly and decays along a cosine to the floor") {
  LrSchedule s{1.0, 0.1, 10, 110};
  CHECK(lr_at(s, 0) == Approx(0.1));
  CHECK(lr_at(s, 9) == Approx(1.0));
  CHECK(lr_at(s, 10) == Approx(1.0));
  CHECK(lr_at(s, 60) == Approx(0.55).margin(0.01));
  CHECK(lr_at(s, 109) == Approx(0.1));
  CHECK(lr_at(s, 500) == Approx(0.1));
  LrSchedule none{1.0, 0.1, 0, 1};
  CHECK(lr_at(none, 0) == Approx(1.0));
}
