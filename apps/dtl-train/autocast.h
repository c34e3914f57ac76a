// Autocast to bf16 or fp16 around a region (libtorch 1.13 and 2.x spell it differently).
#pragma once

#include <optional>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace dtl::train {

/// Turns autocast to `dtype` on for `device`'s type for its lifetime; nothing without a dtype.
class Autocast {
 public:
  Autocast(std::optional<c10::ScalarType> dtype, c10::Device device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  bool cuda_;
};

/// The dtype autocast is on with for `device`'s type in this thread; std::nullopt when it is off.
std::optional<c10::ScalarType> autocast_dtype(c10::Device device);

/// Whether autocast keeps the low-precision copy of each fp32 weight for the rest of its region
/// (this thread). Off for ZeRO stage 3, whose blocks release their weights as they finish.
void set_autocast_weight_cache(bool on);

/// Whether this libtorch autocasts to `dtype` on `device`'s type: CUDA both bf16 and fp16, the
/// CPU bf16, and fp16 from libtorch 2.5 on.
bool autocast_supports(c10::ScalarType dtype, c10::Device device);

}  // namespace dtl::train
