#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace dtl::train {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DTL_AUTOCAST_BY_DEVICE_TYPE 1
#endif

Autocast::Autocast(std::optional<c10::ScalarType> dtype, c10::Device device)
    : on_(dtype.has_value()), cuda_(device.is_cuda()) {
  if (!on_) return;
#ifdef DTL_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(device.type(), true);
  at::autocast::set_autocast_dtype(device.type(), *dtype);
#else
  if (cuda_) {
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(*dtype);
  } else {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(*dtype);
  }
#endif
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!on_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#ifdef DTL_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(cuda_ ? c10::kCUDA : c10::kCPU, false);
#else
  if (cuda_) {
    at::autocast::set_enabled(false);
  } else {
    at::autocast::set_cpu_enabled(false);
  }
#endif
}

std::optional<c10::ScalarType> autocast_dtype(c10::Device device) {
#ifdef DTL_AUTOCAST_BY_DEVICE_TYPE
  if (!at::autocast::is_autocast_enabled(device.type())) return std::nullopt;
  return at::autocast::get_autocast_dtype(device.type());
#else
  if (device.is_cuda()) {
    if (!at::autocast::is_enabled()) return std::nullopt;
    return at::autocast::get_autocast_gpu_dtype();
  }
  if (!at::autocast::is_cpu_enabled()) return std::nullopt;
  return at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast_weight_cache(bool on) { at::autocast::set_autocast_cache_enabled(on); }

bool autocast_supports(c10::ScalarType dtype, c10::Device device) {
  if (dtype == at::kBFloat16 || device.is_cuda()) return dtype == at::kBFloat16 || dtype == at::kHalf;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  return dtype == at::kHalf;
#else
  return false;
#endif
}

}  // namespace dtl::train
