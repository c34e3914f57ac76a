// The model's CPU fast path: cpu_kernels.h's GELU and causal attention as autograd functions.
// They compute what torch's ops compute (to fp32 rounding: the tests compare them), for CPU
// float tensors; the model uses torch's ops elsewhere (CUDA, bf16 autocast, attention dropout)
// and with --cpu_kernels torch. Differentiable once (no double backward).
#pragma once

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

}  // namespace dtl::train
