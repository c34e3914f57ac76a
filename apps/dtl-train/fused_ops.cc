#include "fused_ops.h"

#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "blas.h"
#include "cpu_kernels.h"

namespace dtl::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kElementsPerTask = 1 << 15;  // GELU: large enough that a task costs more than its start

bool cpu_float(const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat; }

struct GeluTanh : torch::autograd::Function<GeluTanh> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x) {
    at::Tensor in = x.contiguous();
    at::Tensor out = at::empty_like(in);
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    at::parallel_for(0, in.numel(), kElementsPerTask,
                     [&](int64_t begin, int64_t end) { gelu_tanh_forward(src + begin, dst + begin, end - begin); });
    ctx->save_for_backward({in});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor in = ctx->get_saved_variables()[0];
    const at::Tensor dg = grads[0].contiguous();
    at::Tensor dx = at::empty_like(in);
    const float* x = in.data_ptr<float>();
    const float* g = dg.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, in.numel(), kElementsPerTask, [&](int64_t begin, int64_t end) {
      gelu_tanh_backward(x + begin, g + begin, out + begin, end - begin);
    });
    return {dx};
  }
};

AttentionShape attention_shape(const at::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * heads) == 0, "fused attention: expected qkv of (batch, time, 3 * ",
              heads, " * head_dim), got ", qkv.sizes());
  return {static_cast<int>(qkv.size(0)), static_cast<int>(qkv.size(1)), static_cast<int>(heads),
          static_cast<int>(qkv.size(2) / (3 * heads))};
}

struct CausalAttention : torch::autograd::Function<CausalAttention> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor qkv, int64_t heads) {
    const AttentionShape s = attention_shape(qkv, heads);
    at::Tensor in = qkv.contiguous();
    at::Tensor y = at::empty({s.batch, s.time, s.width()}, in.options());
    at::Tensor probs = at::empty({s.batch, s.heads, s.time, s.time}, in.options());
    const CblasSgemm gemm = process_cblas_sgemm();
    TORCH_CHECK(gemm, "fused attention: no sgemm in this process (check fused_attention_usable first)");
    at::parallel_for(0, s.pairs(), 1, [&](int64_t begin, int64_t end) {
      causal_attention_forward(gemm, s, begin, end, in.data_ptr<float>(), y.data_ptr<float>(), probs.data_ptr<float>());
    });
    ctx->save_for_backward({in, probs});
    ctx->saved_data["heads"] = heads;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &in = saved[0], &probs = saved[1];
    const AttentionShape s = attention_shape(in, ctx->saved_data["heads"].toInt());
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dqkv = at::empty_like(in);
    const CblasSgemm gemm = process_cblas_sgemm();
    at::parallel_for(0, s.pairs(), 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(static_cast<size_t>(kAttentionBlock) * s.time);
      causal_attention_backward(gemm, s, begin, end, in.data_ptr<float>(), probs.data_ptr<float>(),
                                dy.data_ptr<float>(), dqkv.data_ptr<float>(), scratch.data());
    });
    return {dqkv, at::Tensor()};
  }
};

}  // namespace

bool fused_gelu_usable(const at::Tensor& x) { return cpu_float(x); }

at::Tensor fused_gelu_tanh(const at::Tensor& x) { return GeluTanh::apply(x); }

bool fused_attention_usable(const at::Tensor& qkv) { return cpu_float(qkv) && process_cblas_sgemm() != nullptr; }

at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads) { return CausalAttention::apply(qkv, heads); }

}  // namespace dtl::train
