#include "loss_scale.h"

#include <stdexcept>

namespace dtl::train {

LossScaler::LossScaler(State state, double growth_factor, double backoff_factor, long long growth_interval)
    : state_(state), growth_factor_(growth_factor), backoff_factor_(backoff_factor), growth_interval_(growth_interval) {
  if (!(state.scale > 0) || !(growth_factor > 1) || !(backoff_factor > 0 && backoff_factor < 1) ||
      growth_interval < 1) {
    throw std::invalid_argument(
        "loss scaler: needs a scale > 0, a growth factor > 1, a backoff factor in (0, 1) and a growth interval >= 1");
  }
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    state_.scale *= backoff_factor_;
    state_.clean_steps = 0;
    return false;
  }
  if (++state_.clean_steps == growth_interval_) {
    state_.scale *= growth_factor_;
    state_.clean_steps = 0;
  }
  return true;
}

}  // namespace dtl::train
