#include <catch2/catch.hpp>

#include <stdexcept>

#include "apps/dtl-train/loss_scale.h"

using dtl::train::LossScaler;

TEST_CASE("loss scaler: starts at GradScaler's 2^16, halves and skips on a non-finite step") {
  LossScaler s;
  CHECK(s.scale() == 65536.0);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 32768.0);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 16384.0);
  CHECK(s.update(true));
  CHECK(s.scale() == 16384.0);
}

TEST_CASE("loss scaler: doubles after growth_interval finite steps in a row, and a skip restarts the count") {
  LossScaler s({1024.0, 0}, 2.0, 0.5, 3);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024.0);
  CHECK(s.update(true));  // the third in a row
  CHECK(s.scale() == 2048.0);
  CHECK(s.state().clean_steps == 0);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK_FALSE(s.update(false));  // one short of growing: halved, and the count starts again
  CHECK(s.scale() == 1024.0);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024.0);
  CHECK(s.update(true));
  CHECK(s.scale() == 2048.0);
}

TEST_CASE("loss scaler: a saved state continues where it was") {
  LossScaler a({4096.0, 0}, 2.0, 0.5, 2);
  a.update(true);
  LossScaler b(a.state(), 2.0, 0.5, 2);
  CHECK(b.update(true));
  CHECK(b.scale() == 8192.0);
}

TEST_CASE("loss scaler: impossible factors are refused") {
  CHECK_THROWS_AS(LossScaler({0.0, 0}), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler({}, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler({}, 2.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler({}, 2.0, 0.5, 0), std::invalid_argument);
}
