// bf16 autocast around a region (libtorch 1.13 and 2.x spell it differently).
#pragma once

#include <c10/core/Device.h>

namespace dtl::train {

/// Turns bf16 autocast on for `device`'s type for its lifetime, when `on`.
class Autocast {
 public:
  Autocast(bool on, c10::Device device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  bool cuda_;
};

/// Whether autocast is on for `device`'s type in this thread.
bool autocast_enabled(c10::Device device);

}  // namespace dtl::train
