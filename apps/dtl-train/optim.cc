#include "optim.h"

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/serialize/archive.h>
#include <torch/version.h>

#include "adamw_kernel.h"

namespace dtl::train {
namespace {

/// One pass over the n floats of a parameter, split across ATen's intra-op threads.
void adamw_cpu(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) { adamw_kernel(p, g, m, v, begin, end, s); });
}

bool fusable(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v) {
  for (const at::Tensor* t : {&p, &g, &m, &v}) {
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || !t->is_contiguous()) return false;
  }
  return true;
}

const char* const kFormat = "dtl-fused-adamw-1";

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define DTL_MULTI_TENSOR_ADAMW 1
#endif

/// The tensors of one group that go to torch's multi-tensor kernel together.
struct MultiTensorBatch {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

/// torch's multi-tensor AdamW over one group, the gradients divided by `divisor` if given (its
/// grad_scale unscales AMP's loss scale); the caller counts the steps first, as torch.optim does.
void step_multi_tensor(MultiTensorBatch& b, double lr, double beta1, double beta2, double wd, double eps,
                       const std::optional<at::Tensor>& divisor) {
#ifdef DTL_MULTI_TENSOR_ADAMW
  at::_foreach_add_(b.steps, 1);
  at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, b.steps, lr, beta1, beta2, wd,
                    eps, /*amsgrad=*/false, /*maximize=*/false, divisor, /*found_inf=*/std::nullopt);
#else
  (void)b, (void)lr, (void)beta1, (void)beta2, (void)wd, (void)eps, (void)divisor;
#endif
}

}  // namespace

FusedAdamW::FusedAdamW(std::vector<Group> groups, double lr, double beta1, double beta2, double eps,
                       bool multi_tensor_on_cpu)
    : groups_(std::move(groups)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps),
      multi_tensor_on_cpu_(multi_tensor_on_cpu) {
  for (const auto& g : groups_) state_.emplace_back(g.params.size());
}

bool FusedAdamW::has_multi_tensor_kernel() {
#ifdef DTL_MULTI_TENSOR_ADAMW
  return true;
#else
  return false;
#endif
}

void FusedAdamW::step(const at::Tensor& grad_scale) {
  at::NoGradGuard no_grad;
  const bool scaled = grad_scale.defined();
  std::optional<float> scale_value;  // read once, where the fused loop needs it (a GPU tensor would sync)
  std::optional<at::Tensor> divisor;  // the multi-tensor kernel's form of it: made once, where it is needed
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const double wd = groups_[gi].weight_decay;
    MultiTensorBatch batch;
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      at::Tensor p = groups_[gi].params[pi].detach();
      const at::Tensor& grad = groups_[gi].params[pi].grad();
      if (!grad.defined()) continue;
      State& st = state_[gi][pi];
      if (!st.exp_avg.defined()) {
        st.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        st.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      st.step += 1;
      if (has_multi_tensor_kernel() && (p.is_cuda() || (multi_tensor_on_cpu_ && p.is_cpu()))) {
        if (!st.device_step.defined()) st.device_step = at::full({}, static_cast<double>(st.step - 1), p.options().dtype(at::kFloat));
        batch.params.push_back(p);
        batch.grads.push_back(grad.detach());
        batch.exp_avgs.push_back(st.exp_avg);
        batch.exp_avg_sqs.push_back(st.exp_avg_sq);
        batch.steps.push_back(st.device_step);
        continue;
      }
      const double bias_correction1 = 1 - std::pow(beta1_, static_cast<double>(st.step));
      const double bias_correction2 = 1 - std::pow(beta2_, static_cast<double>(st.step));
      const double step_size = lr_ / bias_correction1;
      at::Tensor g = grad.detach();
      if (fusable(p, g, st.exp_avg, st.exp_avg_sq) && (!scaled || grad_scale.device().is_cpu())) {
        if (!scale_value) scale_value = scaled ? grad_scale.item<float>() : 1.0f;
        const AdamWScalars s{*scale_value,
                        static_cast<float>(1 - lr_ * wd),
                        static_cast<float>(beta1_),
                        static_cast<float>(1 - beta1_),
                        static_cast<float>(beta2_),
                        static_cast<float>(1 - beta2_),
                        static_cast<float>(std::sqrt(bias_correction2)),
                        static_cast<float>(eps_),
                        static_cast<float>(-step_size)};
        adamw_cpu(p.data_ptr<float>(), g.data_ptr<float>(), st.exp_avg.data_ptr<float>(),
                  st.exp_avg_sq.data_ptr<float>(), p.numel(), s);
      } else {  // torch::optim::AdamW's own ops
        if (scaled) g = g * grad_scale;
        if (wd != 0) p.mul_(1 - lr_ * wd);
        st.exp_avg.mul_(beta1_).add_(g, 1 - beta1_);
        st.exp_avg_sq.mul_(beta2_).addcmul_(g, g, 1 - beta2_);
        const at::Tensor denom = (st.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(eps_);
        p.addcdiv_(st.exp_avg, denom, -step_size);
      }
    }
    if (batch.params.empty()) continue;
    if (scaled && !divisor) divisor = at::reciprocal(grad_scale.to(batch.params.front().device(), at::kFloat));
    step_multi_tensor(batch, lr_, beta1_, beta2_, wd, eps_, divisor);
  }
}

size_t FusedAdamW::state_bytes() const {
  size_t bytes = 0;
  for (const auto& group : state_) {
    for (const State& st : group) {
      for (const at::Tensor* t : {&st.exp_avg, &st.exp_avg_sq}) {
        if (t->defined()) bytes += t->numel() * t->element_size();
      }
    }
  }
  return bytes;
}

void FusedAdamW::save(torch::serialize::OutputArchive& archive) const {
  archive.write("format", c10::IValue(std::string(kFormat)));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const std::string key = std::to_string(gi) + "." + std::to_string(pi);
      const State& st = state_[gi][pi];
      archive.write("step." + key, c10::IValue(st.step));
      if (st.exp_avg.defined()) {
        archive.write("exp_avg." + key, st.exp_avg, /*is_buffer=*/true);
        archive.write("exp_avg_sq." + key, st.exp_avg_sq, /*is_buffer=*/true);
      }
    }
  }
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  c10::IValue format;
  if (!archive.try_read("format", format) || !format.isString() || format.toStringRef() != kFormat) {
    throw std::runtime_error(std::string("the checkpoint's optimizer state is not dtl-train's fused AdamW (") +
                             kFormat + "); it was written by another version of dtl-train");
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const std::string key = std::to_string(gi) + "." + std::to_string(pi);
      const at::Tensor& p = groups_[gi].params[pi];
      c10::IValue step;
      archive.read("step." + key, step);
      at::Tensor m, v;
      if (step.toInt() > 0) {
        archive.read("exp_avg." + key, m, /*is_buffer=*/true);
        archive.read("exp_avg_sq." + key, v, /*is_buffer=*/true);
        if (!m.sizes().equals(p.sizes()) || !v.sizes().equals(p.sizes())) {
          throw std::runtime_error("optimizer state " + key + " has another shape than its parameter");
        }
      }
      set_state(gi, pi, step.toInt(), m, v);
    }
  }
}

void FusedAdamW::set_state(size_t group, size_t index, int64_t step, const at::Tensor& exp_avg,
                           const at::Tensor& exp_avg_sq) {
  const at::Tensor& p = groups_[group].params[index];
  State st;
  st.step = step;
  if (step > 0) {
    if (exp_avg.numel() != p.numel() || exp_avg_sq.numel() != p.numel()) {
      throw std::runtime_error("optimizer state " + std::to_string(group) + "." + std::to_string(index) + " has " +
                               std::to_string(exp_avg.numel()) + " elements; its parameter has " +
                               std::to_string(p.numel()));
    }
    st.exp_avg = at::empty_like(p, at::MemoryFormat::Contiguous).copy_(exp_avg.reshape(p.sizes()));
    st.exp_avg_sq = at::empty_like(p, at::MemoryFormat::Contiguous).copy_(exp_avg_sq.reshape(p.sizes()));
  }
  state_[group][index] = std::move(st);
}

void FusedAdamW::clear_state() {
  for (auto& group : state_) {
    for (State& st : group) st = State{};
  }
}

}  // namespace dtl::train
