#include "cpu_kernels.h"

// Plain loops that the compiler vectorizes. CMakeLists.txt compiles this file with
// -fno-math-errno and -fno-trapping-math (so that clamps and divisions may be computed for every
// lane and then selected) and -ffp-contract=off (no fused multiply-add): every element then takes
// the same IEEE operations in the vector body, in the scalar tail and in each CPU clone, so the
// results do not depend on the CPU, nor on how a tensor is split. Sums run in 16 fixed lanes, for
// the same reason (a vectorizer may not reorder a float sum on its own). The x86-64 clones are
// AVX-512, AVX2 and the baseline; GCC 12 does not vectorize the GELU loops in an arch=haswell clone,
// whose instructions are those of x86-64-v3.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11  // x86-64-v4: GCC 11
#define DTL_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DTL_CPU_CLONES
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dtl::train {
namespace {

constexpr int kLanes = 16;

/// e^x for x in [-87, 88] (Cephes' expf: x = n ln 2 + r, a degree-6 polynomial in r, then 2^n
/// through the exponent bits; within 2 ulp). Callers clamp x: one clamp keeps the loop branch-free.
inline float exp_in_range(float x) {
  // Adding 1.5 * 2^23 rounds x / ln 2 to an integer n, which then sits in the low mantissa bits: read
  // from there (a float-to-int conversion of a NaN would be undefined behaviour).
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  uint32_t shifted_bits, magic_bits;
  const float magic = 12582912.0f;
  std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  std::memcpy(&magic_bits, &magic, sizeof magic_bits);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = (shifted_bits - magic_bits + 127u) << 23;  // 2^n, n in [-126, 127] (mod 2^32 arithmetic)
  float two_to_n;
  std::memcpy(&two_to_n, &bits, sizeof two_to_n);
  return p * two_to_n;
}

/// tanh(z) = 1 - 2 / (e^{2|z|} + 1) with z's sign. Its absolute error is that of 1 - a float
/// (~6e-8), which is what GELU's 1 + tanh needs; at |z| >= 9 it is exactly +-1.
inline float tanh_for_gelu(float z) {
  const float a = std::min(std::fabs(z), 44.0f);
  return std::copysign(1.0f - 2.0f / (exp_in_range(2.0f * a) + 1.0f), z);
}

constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

/// The lane sums of a 16-lane accumulator, in a fixed order.
inline float lane_sum(const float* acc) {
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

/// Row-major C = alpha op(A) op(B) + beta C through cblas_sgemm.
inline void gemm(CblasSgemm f, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  f(kCblasRowMajor, ta ? kCblasTrans : kCblasNoTrans, tb ? kCblasTrans : kCblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
    beta, c, ldc);
}

/// Row i of a block of scores, its keys 0..i (the rest of the row is set to 0): scaled scores in,
/// probabilities out. The maximum is subtracted first, as in torch's softmax.
DTL_CPU_CLONES void softmax_causal_row(float* row, int keys, int row_width) {
  float mx[kLanes];
  std::fill(mx, mx + kLanes, -INFINITY);
  int j = 0;
  for (; j + kLanes <= keys; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) mx[l] = std::max(mx[l], row[j + l]);
  }
  float m = -INFINITY;
  for (int l = 0; l < kLanes; ++l) m = std::max(m, mx[l]);
  for (; j < keys; ++j) m = std::max(m, row[j]);
  float acc[kLanes] = {};
  j = 0;
  for (; j + kLanes <= keys; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_in_range(std::max(row[j + l] - m, -87.0f));
      row[j + l] = e;
      acc[l] += e;
    }
  }
  float sum = lane_sum(acc);
  for (; j < keys; ++j) {
    row[j] = exp_in_range(std::max(row[j] - m, -87.0f));
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (j = 0; j < keys; ++j) row[j] *= inv;
  for (; j < row_width; ++j) row[j] = 0;
}

/// dS = P * (dP - delta) over row i of a block, keys 0..i, delta = sum of P * dP over them (torch's
/// softmax backward: a row with one key gets exactly 0); the rest of the row is set to 0.
DTL_CPU_CLONES void softmax_backward_row(float* dp, const float* p, int n, int row_width) {
  float acc[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += p[j + l] * dp[j + l];
  }
  float delta = lane_sum(acc);
  for (; j < n; ++j) delta += p[j] * dp[j];
  for (j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
  for (; j < row_width; ++j) dp[j] = 0;
}

}  // namespace

DTL_CPU_CLONES void gelu_tanh_forward(const float* __restrict x, float* __restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_for_gelu(kGeluS * (v + kGeluA * v * v * v));
    g[i] = 0.5f * v * (1.0f + t);
  }
}

DTL_CPU_CLONES void gelu_tanh_backward(const float* __restrict x, const float* __restrict dg, float* __restrict dx,
                                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_for_gelu(kGeluS * (v + kGeluA * v * v * v));
    const float slope = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluS * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dg[i] * slope;
  }
}

void causal_attention_forward(CblasSgemm f, const AttentionShape& s, int64_t begin, int64_t end, const float* qkv,
                              float* y, float* probs) {
  const int T = s.time, D = s.head_dim, C = s.width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t pair = begin; pair < end; ++pair) {
    const int64_t b = pair / s.heads, h = pair % s.heads;
    const float* q = qkv + b * T * 3 * C + h * D;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* p = probs + pair * T * T;
    float* out = y + b * T * C + h * D;
    for (int i0 = 0; i0 < T; i0 += kAttentionBlock) {
      const int i1 = std::min(T, i0 + kAttentionBlock), rows = i1 - i0;
      // Scores of rows i0..i1-1 against keys 0..i1-1: the keys after i1 are masked for all of them.
      gemm(f, false, true, rows, i1, D, scale, q + int64_t{i0} * 3 * C, 3 * C, k, 3 * C, 0.0f, p + int64_t{i0} * T, T);
      for (int i = i0; i < i1; ++i) softmax_causal_row(p + int64_t{i} * T, i + 1, i1);
      gemm(f, false, false, rows, D, i1, 1.0f, p + int64_t{i0} * T, T, v, 3 * C, 0.0f, out + int64_t{i0} * C, C);
    }
  }
}

void causal_attention_backward(CblasSgemm f, const AttentionShape& s, int64_t begin, int64_t end, const float* qkv,
                               const float* probs, const float* dy, float* dqkv, float* scratch) {
  const int T = s.time, D = s.head_dim, C = s.width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int blocks = (T + kAttentionBlock - 1) / kAttentionBlock;
  for (int64_t pair = begin; pair < end; ++pair) {
    const int64_t b = pair / s.heads, h = pair % s.heads;
    const int64_t offset = b * T * 3 * C + h * D;
    const float *q = qkv + offset, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + offset, *dk = dq + C, *dv = dq + 2 * C;
    const float* p = probs + pair * T * T;
    const float* dout = dy + b * T * C + h * D;
    // The last block reaches every key, so it writes dk and dv (beta 0) and the others add to them.
    for (int block = blocks - 1; block >= 0; --block) {
      const int i0 = block * kAttentionBlock, i1 = std::min(T, i0 + kAttentionBlock), rows = i1 - i0;
      const float beta = block == blocks - 1 ? 0.0f : 1.0f;
      const float* pb = p + int64_t{i0} * T;
      const float* dyb = dout + int64_t{i0} * C;
      gemm(f, true, false, i1, D, rows, 1.0f, pb, T, dyb, C, beta, dv, 3 * C);           // dv += P^T dy
      gemm(f, false, true, rows, i1, D, 1.0f, dyb, C, v, 3 * C, 0.0f, scratch, T);       // dP = dy v^T
      for (int i = i0; i < i1; ++i) softmax_backward_row(scratch + int64_t{i - i0} * T, p + int64_t{i} * T, i + 1, i1);
      gemm(f, false, false, rows, D, i1, scale, scratch, T, k, 3 * C, 0.0f, dq + int64_t{i0} * 3 * C, 3 * C);  // dq = dS k
      gemm(f, true, false, i1, D, rows, scale, scratch, T, q + int64_t{i0} * 3 * C, 3 * C, beta, dk, 3 * C);   // dk += dS^T q
    }
  }
}

}  // namespace dtl::train
