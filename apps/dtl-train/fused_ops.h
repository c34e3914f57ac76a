// The model's fast paths (--kernels fused). On CPU float tensors, cpu_kernels.h's GELU and causal
// attention as autograd functions; elsewhere (CUDA, bf16 autocast, attention dropout) the attention
// goes to torch's scaled_dot_product_attention, whose kernel torch picks at run time. On every
// device the classifier's cross-entropy is fused: the logits' softmax is never kept in fp32.
// Each computes what torch's ops compute, to the rounding the tests state. Differentiable once (no
// double backward).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace dtl::train {

/// Whether the fused GELU takes `x`: a CPU float tensor.
bool fused_gelu_usable(const at::Tensor& x);
/// torch::gelu(x, "tanh").
at::Tensor fused_gelu_tanh(const at::Tensor& x);

/// Whether the fused attention takes `qkv`: a CPU float tensor, and an sgemm in the process (blas.h).
bool fused_attention_usable(const at::Tensor& qkv);
/// Causal self-attention without dropout: qkv (batch, time, 3 * width), each token's row laid out
/// (q, k, v) x heads x head_dim as the qkv projection writes it -> (batch, time, width), heads side
/// by side as the output projection reads them.
at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads);

/// The same attention (same layouts) through torch's scaled_dot_product_attention with is_causal,
/// `dropout` on the attention weights: on CUDA cuDNN's or flash attention where they take the
/// inputs, as torch chooses; libtorch 1.x has only its math form, _scaled_dot_product_attention.
at::Tensor sdpa_causal_attention(const at::Tensor& qkv, int64_t heads, double dropout);
/// The kernel sdpa_causal_attention runs for a qkv of this shape, dtype and device that requires
/// gradients: "cuDNN", "flash", "memory-efficient", "math", as torch's own choice reports it.
std::string sdpa_backend(const at::Tensor& qkv, int64_t heads, double dropout);

/// Rows x vocabulary elements of logits the fused classifier holds at once, before its softmax.
constexpr int64_t kClassifierChunk = int64_t{1} << 28;

/// The mean cross-entropy of the logits x weight^T against `targets`, what
/// cross_entropy(linear(x, weight).float(), targets) gives, without that: x (rows, width), weight
/// (vocab, width), targets (rows) of token ids. The products run in `dtype` (the autocast dtype,
/// or x's). The forward computes the logits `chunk` elements at a time, keeps only their softmax
/// less one at each target (the gradient of the summed loss), in `dtype`, or in fp32 for fp16,
/// whose subnormals would lose the smallest probabilities (`kept` overrides that, for tests); the
/// backward is then two matrix products. Each row's loss is log-sum-exp minus the target's logit,
/// the log-sum-exp read off the largest logit and its probability (>= 1 / vocab, so it never
/// underflows): to the rounding of `kept` on that probability.
at::Tensor fused_classifier_loss(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                 c10::ScalarType dtype, int64_t chunk = kClassifierChunk,
                                 std::optional<c10::ScalarType> kept = std::nullopt);

}  // namespace dtl::train
