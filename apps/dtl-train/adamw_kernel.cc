#include "adamw_kernel.h"

// A plain loop that the compiler vectorizes (CMakeLists.txt compiles this file with
// -fno-math-errno, so that sqrt vectorizes, and -ffp-contract=off, so that no multiply-add is
// fused). Every element then takes the same correctly rounded IEEE operations whether it lands in
// the vector body or the scalar tail, and in either clone below: results do not depend on how
// the caller splits a parameter, nor on the CPU. (ATen's Vectorized<float> was tried first: its
// AVX2 variant needs Sleef's headers, which Debian's libtorch-dev lacks, and its generic variant
// calls out of line per 8 floats and ran no faster than torch::optim::AdamW.)
// On x86-64 the loop is compiled for AVX2 and for the baseline; the dynamic loader picks one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DTL_CPU_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define DTL_CPU_CLONES
#endif

#include <cmath>

namespace dtl::train {

DTL_CPU_CLONES void adamw_kernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                                 float* __restrict v, int64_t begin, int64_t end, const AdamWScalars& scalars) {
  const AdamWScalars s = scalars;  // a local copy: the compiler need not reload it after each store
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] * s.beta1 + s.one_minus_beta1 * gi;
    const float vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / s.sqrt_bias_correction2 + s.eps;
    p[i] = p[i] * s.decay + s.neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace dtl::train
