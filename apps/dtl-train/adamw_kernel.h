// The fused AdamW's inner loop, without libtorch (adamw_kernel.cc compiles in a second).
#pragma once

#include <cstdint>

namespace dtl::train {

/// The step's scalars, rounded to float as torch rounds a double scalar applied to a float tensor.
struct AdamWScalars {
  float grad_scale;  ///< g is read as g * grad_scale (1: as it is)
  float decay;  ///< 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bias_correction2;
  float eps;
  float neg_step_size;  ///< -lr / bias_correction1
};

/// Updates floats [begin, end) of param p and moments m, v from gradient g (read as g * grad_scale),
/// in torch::optim::AdamW's order:
///   p *= decay; m = m * beta1 + (1 - beta1) * g; v = v * beta2 + (1 - beta2) * g * g;
///   p += -step_size * m / (sqrt(v) / sqrt(bias_correction2) + eps)
void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const AdamWScalars& s);

}  // namespace dtl::train
