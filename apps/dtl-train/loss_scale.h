// Dynamic loss scaling for fp16, with the semantics of torch.cuda.amp.GradScaler: the loss is
// multiplied by the scale before backward so that small gradients survive fp16; a step whose
// gradients are not all finite is skipped and the scale is halved; after `growth_interval` finite
// steps in a row the scale doubles. Pure: the training loop tells it what it found.
#pragma once

namespace dtl::train {

/// Where the scale stands; a checkpoint keeps it.
struct LossScaleState {
  double scale = 65536.0;     ///< GradScaler's init_scale, 2^16
  long long clean_steps = 0;  ///< finite steps since the last change of the scale
};

class LossScaler {
 public:
  using State = LossScaleState;
  explicit LossScaler(State state = {}, double growth_factor = 2.0, double backoff_factor = 0.5,
                      long long growth_interval = 2000);

  double scale() const { return state_.scale; }
  const State& state() const { return state_; }

  /// After a step's backward: `finite` says whether every gradient was finite. Returns whether
  /// the optimizer may step (false: skip it), and updates the scale for the next step.
  bool update(bool finite);

 private:
  State state_;
  double growth_factor_, backoff_factor_;
  long long growth_interval_;
};

}  // namespace dtl::train
