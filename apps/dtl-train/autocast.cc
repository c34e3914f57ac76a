#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace dtl::train {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DTL_AUTOCAST_BY_DEVICE_TYPE 1
#endif

Autocast::Autocast(bool on, c10::Device device) : on_(on), cuda_(device.is_cuda()) {
  if (!on_) return;
#ifdef DTL_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(device.type(), true);
  at::autocast::set_autocast_dtype(device.type(), at::kBFloat16);
#else
  if (cuda_) {
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  } else {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
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

bool autocast_enabled(c10::Device device) {
#ifdef DTL_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(device.type());
#else
  return device.is_cuda() ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

}  // namespace dtl::train
