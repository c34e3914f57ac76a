// The learning rate of each optimizer step: linear warmup, then a cosine down to a floor.
#pragma once

namespace dtl::train {

struct LrSchedule {
  double peak = 1e-3;
  double floor = 1e-4;
  long long warmup = 0;  ///< steps of linear warmup
  long long total = 1;   ///< steps of the whole run; the cosine reaches `floor` at the last one
};

/// Learning rate for 0-based step `step`; never 0 during warmup so step 0 already moves.
double lr_at(const LrSchedule& s, long long step);

}  // namespace dtl::train
