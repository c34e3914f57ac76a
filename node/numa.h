// --numa_binding: which CPUs a worker may run on, from the NUMA topology in /sys and its GPU's PCI
// address, as torch 2.15's torch/numa/binding.py computes them. Pure: every file is read through a
// `SysfsRead`, so tests hand it a fake tree.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace dtl::node {

/// Sorted, distinct logical CPU numbers.
using CpuSet = std::vector<int>;

/// The contents of a sysfs file by its absolute path ("/sys/bus/pci/devices/.../numa_node"), or
/// nullopt where it cannot be read.
using SysfsRead = std::function<std::optional<std::string>(const std::string& path)>;

/// Reads `root` + path: root "" is the machine's own /sys.
SysfsRead sysfs_under(std::string root);

/// The CPUs this process may run on (sched_getaffinity).
CpuSet current_cpus();

/// "0-2,4" -> {0,1,2,4}, as the kernel writes cpulist files; nullopt for anything else.
std::optional<CpuSet> parse_cpu_list(std::string_view text);
/// {0,1,2,4} -> "0-2,4".
std::string format_cpu_list(const CpuSet& cpus);

/// A PCI device's name under /sys/bus/pci/devices, as torch writes it: (0, 0x1b, 0) -> "0000:1b:00.0".
std::string sysfs_pci_address(unsigned domain, unsigned bus, unsigned device);

struct NumaQuery {
  std::string mode;                      ///< node, socket, exclusive or core-complex
  std::vector<std::string> device_pci;   ///< sysfs PCI address of each GPU the workers may use
  int device = 0;                        ///< the worker's GPU, an index into device_pci
  CpuSet allowed;                        ///< dtlaunch's own affinity: bindings stay inside it
};

/// The worker's CPUs, or why there are none (a message without the flag's name, exit code 2).
Result<CpuSet> numa_cpus(const NumaQuery& query, const SysfsRead& read);

}  // namespace dtl::node
