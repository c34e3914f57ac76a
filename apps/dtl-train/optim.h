// AdamW with decoupled weight decay, fused: the same update as torch::optim::AdamW (no amsgrad),
// but on CPU fp32 contiguous parameters one vectorized pass per parameter reads param, grad and
// both moments and writes param and moments, instead of ~10 separate tensor ops (each a pass over
// memory, most allocating a temporary). On CUDA with libtorch 2.2+, torch's own multi-tensor
// kernel (at::_fused_adamw_, what torch.optim.AdamW(fused=True) runs): one launch per group
// instead of ~10 per parameter. Elsewhere the same few torch ops torch::optim::AdamW runs.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace dtl::train {

class FusedAdamW {
 public:
  struct Group {
    std::vector<at::Tensor> params;
    double weight_decay = 0;
  };
  /// Per-parameter state, created (zeros) at the parameter's first step, like torch's.
  struct State {
    int64_t step = 0;
    at::Tensor exp_avg, exp_avg_sq;
    at::Tensor device_step;  ///< `step` as the multi-tensor kernel reads it (a float on the device)
  };

  /// `multi_tensor_on_cpu`: CPU parameters too go to torch's multi-tensor kernel (libtorch 2.4+),
  /// for tests of that path on a machine without a GPU.
  FusedAdamW(std::vector<Group> groups, double lr, double beta1, double beta2, double eps = 1e-8,
             bool multi_tensor_on_cpu = false);

  /// Whether this libtorch has torch's multi-tensor AdamW kernel (2.2+).
  static bool has_multi_tensor_kernel();

  /// The learning rate of every group from the next step on (the schedule sets it each step).
  void set_lr(double lr) { lr_ = lr; }

  /// One update of every parameter that has a gradient; parameters without one are skipped.
  /// `grad_scale` (a 0-dim tensor, e.g. the clipping coefficient), when given, multiplies each
  /// gradient as it is read: the same update as scaling the gradients first, without that pass. On
  /// the multi-tensor path torch's kernel divides by its reciprocal instead (so to rounding: 1 ulp
  /// apart for some elements) and leaves the scaled gradients in .grad.
  void step(const at::Tensor& grad_scale = {});

  /// All per-parameter state, exactly: a loaded optimizer continues bit-identically.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Throws std::runtime_error if the archive holds another optimizer or other parameter shapes.
  void load(torch::serialize::InputArchive& archive);

  const State& state(size_t group, size_t index) const { return state_[group][index]; }
  /// Sets one parameter's state, as load does: `step` 0 means none yet; otherwise the moments are
  /// copied (any shape with the parameter's element count) onto the parameter's device. Throws
  /// std::runtime_error when their element count is another.
  void set_state(size_t group, size_t index, int64_t step, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq);
  /// Frees every parameter's state, as before the first step.
  void clear_state();
  /// Bytes of the moments held (created at each parameter's first step).
  size_t state_bytes() const;

 private:
  std::vector<Group> groups_;
  std::vector<std::vector<State>> state_;  ///< [group][param]
  double lr_, beta1_, beta2_, eps_;
  bool multi_tensor_on_cpu_;
};

}  // namespace dtl::train
