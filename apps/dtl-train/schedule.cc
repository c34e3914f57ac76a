#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dtl::train {

double lr_at(const LrSchedule& s, long long step) {
  if (step < s.warmup) return s.peak * static_cast<double>(step + 1) / static_cast<double>(s.warmup);
  const long long span = std::max<long long>(1, s.total - 1 - s.warmup);
  const double progress = std::clamp(static_cast<double>(step - s.warmup) / static_cast<double>(span), 0.0, 1.0);
  return s.floor + 0.5 * (s.peak - s.floor) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace dtl::train
