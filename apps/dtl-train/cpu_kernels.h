// The loops of dtl-train's CPU fast path, without libtorch (cpu_kernels.cc compiles in seconds):
// the tanh GELU, whose forward and backward torch 1.13 runs through Sleef's tanh (~14% of a
// training step on a CPU), and causal self-attention that computes only the blocks on or below
// the diagonal and reads q, k and v where the qkv projection left them, instead of four
// permuted copies, a masked T x T fill and a separate softmax (fused_ops.h wraps them for autograd).
#pragma once

#include <cstdint>

namespace dtl::train {

/// cblas_sgemm's signature, looked up at run time in whichever BLAS libtorch loaded (blas.h), so
/// the attention's products run on the same library.
using CblasSgemm = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc);
/// CBLAS's values for its layout and transpose arguments.
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

/// g = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch's gelu(x, "tanh"), over n floats.
void gelu_tanh_forward(const float* x, float* g, int64_t n);
/// dx = dg * d/dx gelu(x): the tanh is recomputed (cheaper than storing it).
void gelu_tanh_backward(const float* x, const float* dg, float* dx, int64_t n);

/// Where the tensors of one attention call are: qkv as the qkv projection writes it, (batch,
/// time, 3, heads, head_dim) contiguous; y as the output projection reads it, (batch, time,
/// heads, head_dim); probs (batch, heads, time, time), of which only the causal part is defined.
struct AttentionShape {
  int batch = 0, time = 0, heads = 0, head_dim = 0;
  int width() const { return heads * head_dim; }
  int64_t pairs() const { return static_cast<int64_t>(batch) * heads; }  ///< (sequence, head) pairs
};

/// y = softmax(q k^T / sqrt(head_dim), causal) v for the (sequence, head) pairs [begin, end);
/// keeps the probabilities for the backward pass.
void causal_attention_forward(CblasSgemm gemm, const AttentionShape& s, int64_t begin, int64_t end, const float* qkv,
                              float* y, float* probs);

/// d qkv from d y for the pairs [begin, end), given the forward's qkv and probs. `scratch`
/// holds kAttentionBlock x time floats (one per thread).
void causal_attention_backward(CblasSgemm gemm, const AttentionShape& s, int64_t begin, int64_t end,
                               const float* qkv, const float* probs, const float* dy, float* dqkv, float* scratch);

/// Query rows per block: a block's scores span only the keys up to its last row.
constexpr int kAttentionBlock = 32;

}  // namespace dtl::train
