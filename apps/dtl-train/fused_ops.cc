#include "fused_ops.h"

#include <algorithm>
#include <array>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

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

/// q, k, v as (batch, heads, time, head_dim) views of the qkv projection's output.
std::array<at::Tensor, 3> split_heads(const at::Tensor& qkv, int64_t heads) {
  const auto B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) == 3 * C && C % heads == 0, "attention: expected qkv of (batch, time, 3 * ",
              heads, " * head_dim), got ", qkv.sizes());
  const at::Tensor t = qkv.view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
  return {t[0], t[1], t[2]};
}

struct Classifier : torch::autograd::Function<Classifier> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t dtype, int64_t chunk, int64_t kept_dtype) {
    const auto type = static_cast<at::ScalarType>(dtype), kept = static_cast<at::ScalarType>(kept_dtype);
    TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) && targets.dim() == 1 &&
                    targets.size(0) == x.size(0),
                "fused classifier: expected x (rows, width), weight (vocab, width), targets (rows), got ", x.sizes(),
                ", ", weight.sizes(), ", ", targets.sizes());
    const at::Tensor xc = x.to(type), wc = weight.to(type), index = targets.to(at::kLong).unsqueeze(1);
    const int64_t rows = x.size(0), vocab = weight.size(0);
    const at::ScalarType loss_type = kept == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor probs = at::empty({rows, vocab}, xc.options().dtype(kept));
    at::Tensor loss = at::empty({rows}, xc.options().dtype(loss_type));
    // Equal chunks of rows, each at most `chunk` logits.
    const int64_t chunks = std::max<int64_t>(1, (rows * vocab + chunk - 1) / std::max<int64_t>(chunk, 1));
    const int64_t step = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t n = std::min(step, rows - r);
      const at::Tensor logits = at::mm(xc.narrow(0, r, n), wc.t());
      at::Tensor p = probs.narrow(0, r, n);
      if (kept == type) {
        at::_softmax_out(p, logits, 1, /*half_to_float=*/false);
      } else if (logits.is_cuda() && kept == at::kFloat && (type == at::kHalf || type == at::kBFloat16)) {
        at::_softmax_out(p, logits, 1, /*half_to_float=*/true);
      } else {
        at::_softmax_out(p, logits.to(kept), 1, /*half_to_float=*/false);
      }
      const auto top = at::max(logits, 1, /*keepdim=*/true);
      const at::Tensor t = index.narrow(0, r, n);
      const at::Tensor top_prob = p.gather(1, std::get<1>(top)).to(loss_type);
      loss.narrow(0, r, n).copy_(
          (std::get<0>(top).to(loss_type) - logits.gather(1, t).to(loss_type) - top_prob.log()).squeeze(1));
      p.scatter_(1, t, p.gather(1, t) - 1);
    }
    ctx->save_for_backward({probs, xc, wc});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return loss.mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &probs = saved[0], &xc = saved[1], &wc = saved[2];
    const auto x_type = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto weight_type = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    // d loss / d logits = (softmax - one-hot) * grad / rows.
    const at::Tensor scale = grads[0] / static_cast<double>(probs.size(0));
    at::Tensor dx, dw;
    if (probs.scalar_type() == xc.scalar_type()) {  // the scale is applied to the products' smaller outputs
      dx = at::mm(probs, wc).to(x_type).mul_(scale);
      dw = at::mm(probs.t(), xc).to(weight_type).mul_(scale);
    } else {  // scaled before the cast, as torch's cross-entropy does, so that small values keep their bits
      at::Tensor d = at::empty(probs.sizes(), probs.options().dtype(xc.scalar_type()));
      at::mul_out(d, probs, scale);
      dx = at::mm(d, wc).to(x_type);
      dw = at::mm(d.t(), xc).to(weight_type);
    }
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

const char* sdpa_backend_name(int64_t choice) {
  switch (choice) {  // at::SDPBackend's values
    case 0:
      return "math";
    case 1:
      return "flash";
    case 2:
      return "memory-efficient";
    case 3:
      return "cuDNN";
    case 4:
      return "a device's own (overrideable)";
    default:
      return "none fits";
  }
}

}  // namespace

bool fused_gelu_usable(const at::Tensor& x) { return cpu_float(x); }

at::Tensor fused_gelu_tanh(const at::Tensor& x) { return GeluTanh::apply(x); }

bool fused_attention_usable(const at::Tensor& qkv) { return cpu_float(qkv) && process_cblas_sgemm() != nullptr; }

at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads) { return CausalAttention::apply(qkv, heads); }

at::Tensor sdpa_causal_attention(const at::Tensor& qkv, int64_t heads, double dropout) {
  const auto [q, k, v] = split_heads(qkv, heads);
#if TORCH_VERSION_MAJOR >= 2
  const at::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, dropout, /*is_causal=*/true);
#else
  const at::Tensor y = std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, dropout, false, /*is_causal=*/true));
#endif
  return y.transpose(1, 2).reshape({qkv.size(0), qkv.size(1), qkv.size(2) / 3});
}

std::string sdpa_backend(const at::Tensor& qkv, int64_t heads, double dropout) {
#if TORCH_VERSION_MAJOR >= 2
  const at::Tensor leaf = qkv.detach().requires_grad_(true);
  const auto [q, k, v] = split_heads(leaf, heads);
  try {
    return sdpa_backend_name(at::_fused_sdp_choice(q, k, v, {}, dropout, /*is_causal=*/true));
  } catch (const c10::Error&) {  // what torch's choice throws where no kernel it may run fits
    return sdpa_backend_name(-1);
  }
#else
  (void)qkv, (void)heads, (void)dropout;
  return sdpa_backend_name(0);
#endif
}

at::Tensor fused_classifier_loss(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                 c10::ScalarType dtype, int64_t chunk, std::optional<c10::ScalarType> kept) {
  const c10::ScalarType keep = kept.value_or(dtype == at::kHalf ? at::kFloat : dtype);
  return Classifier::apply(x, weight, targets, static_cast<int64_t>(dtype), chunk, static_cast<int64_t>(keep));
}

}  // namespace dtl::train
