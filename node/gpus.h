// Which GPUs this machine has (NVML loaded at run time, else `nvidia-smi -L`, or fakes for CI) and
// which of them the workers get (inherited CUDA_VISIBLE_DEVICES, then --gpu_ids).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace dtl::node {

struct Gpu {
  int index = 0;     ///< physical index, as CUDA_VISIBLE_DEVICES counts without narrowing
  std::string uuid;  ///< "GPU-..."
  std::string name;
  std::string pci{};  ///< its sysfs PCI address ("0000:1b:00.0"), from NVML; empty where unknown
};

struct GpuInventory {
  std::vector<Gpu> gpus;
  std::string source;  ///< "nvml", "nvidia-smi", "fake" or "none"
};

/// What `dtlaunch env` adds to the inventory: from NVML only (absent without a driver).
struct GpuDetails {
  std::string driver_version;
  std::vector<unsigned long long> memory_bytes;  ///< total per GPU, by NVML index
};
std::optional<GpuDetails> query_gpu_details();

/// One GPU's figures now, from NVML.
struct GpuReading {
  std::string uuid;
  std::optional<unsigned> util_percent;  ///< busy share of NVML's last sample period
  std::optional<unsigned long long> memory_used_bytes, memory_total_bytes;
};

/// NVML kept open between readings (`dtlaunch top` asks every second): opened at the first
/// reading, and closed with the object.
class GpuMeter {
 public:
  GpuMeter();
  ~GpuMeter();
  GpuMeter(const GpuMeter&) = delete;
  GpuMeter& operator=(const GpuMeter&) = delete;
  /// Every GPU's figures by NVML index; empty without NVML (no driver, no GPU).
  std::vector<GpuReading> read();

 private:
  struct Session;
  std::unique_ptr<Session> session_;
  bool tried_ = false;
};

/// Asks the machine; `fake` (from --fake_gpus) short-cuts the question.
GpuInventory discover_gpus(std::optional<int> fake);

/// Parses `nvidia-smi -L` lines such as "GPU 0: NVIDIA H200 (UUID: GPU-5f3c...)".
std::vector<Gpu> parse_nvidia_smi_list(const std::vector<std::string>& lines);

/// One CUDA_VISIBLE_DEVICES entry per GPU the workers may use, or why the selection is invalid
/// (exit code 2). `inherited_visible`: dtlaunch's own CUDA_VISIBLE_DEVICES (indices or GPU-/MIG-
/// UUIDs, prefixes allowed as CUDA allows them). `gpu_ids`: indices among the GPUs visible after
/// that, called `ids_called` in messages (the flag, or the variable or config file's key that gave
/// them).
Result<std::vector<std::string>> select_gpus(const std::vector<Gpu>& all,
                                             const std::optional<std::string>& inherited_visible,
                                             const std::optional<std::vector<int>>& gpu_ids,
                                             const std::string& ids_called = "--gpu_ids");

}  // namespace dtl::node
