#include "node/numa.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "base/text.h"

namespace dtl::node {
namespace {

/// A failed look-up: its message travels up unchanged to the caller of numa_cpus.
struct Missing {
  std::string why;
};

/// sysfs files end in a newline, which text::trim keeps.
std::string strip(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
}

CpuSet intersect(const CpuSet& a, const CpuSet& b) {
  CpuSet out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

/// torch's file look-ups, each with the message it fails with.
class Topology {
 public:
  Topology(const NumaQuery& q, const SysfsRead& read) : q_(q), read_(read) {}

  std::string file(const std::string& path) const {
    auto text = read_(path);
    if (!text) throw Missing{"cannot read " + path};
    return strip(*text);
  }
  long number(const std::string& path) const {
    auto v = text::to_long(file(path));
    if (!v) throw Missing{path + ": expected a number"};
    return *v;
  }
  CpuSet cpu_list(const std::string& path) const {
    auto cpus = parse_cpu_list(file(path));
    if (!cpus) throw Missing{path + ": expected a CPU list"};
    return *cpus;
  }

  /// A single-node machine often says -1, which means node 0.
  int node_of_device(int device) const {
    return static_cast<int>(std::max(0L, number("/sys/bus/pci/devices/" + q_.device_pci.at(device) + "/numa_node")));
  }
  /// The node's CPUs that dtlaunch itself may use.
  CpuSet node_cpus(int node) const {
    return intersect(cpu_list("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"), q_.allowed);
  }
  std::string cpu_dir(int cpu) const { return "/sys/devices/system/cpu/cpu" + std::to_string(cpu); }
  int socket_of_cpu(int cpu) const { return static_cast<int>(number(cpu_dir(cpu) + "/topology/physical_package_id")); }

  /// The GPUs on `node`, in index order.
  std::vector<int> devices_on(int node) const {
    std::vector<int> out;
    for (int d = 0; d < static_cast<int>(q_.device_pci.size()); ++d) {
      if (node_of_device(d) == node) out.push_back(d);
    }
    return out;
  }

  /// The CPUs sharing the highest-level data or unified cache with `cpu`.
  CpuSet last_level_cache(int cpu) const {
    long top = -1;
    CpuSet shared;
    for (int i = 0; i < 64; ++i) {  // torch lists cache/index*; sysfs numbers them from 0
      const std::string dir = cpu_dir(cpu) + "/cache/index" + std::to_string(i);
      auto type = read_(dir + "/type");
      if (!type) continue;
      const auto t = strip(*type);
      if (t != "Unified" && t != "Data") continue;
      long level = number(dir + "/level");
      if (level <= top) continue;
      top = level;
      shared = cpu_list(dir + "/shared_cpu_list");
    }
    if (shared.empty()) throw Missing{"no cache of " + cpu_dir(cpu) + " lists the CPUs sharing it"};
    return shared;
  }

 private:
  const NumaQuery& q_;
  const SysfsRead& read_;
};

/// `cpus` grouped by key(cpu), each group keyed by the key, which is its smallest CPU.
template <class Key>
std::map<int, CpuSet> group_by(const CpuSet& cpus, Key key) {
  std::map<int, CpuSet> groups;
  for (int cpu : cpus) groups[key(cpu)].push_back(cpu);
  return groups;
}

CpuSet socket_cpus(const Topology& topo, int node) {
  const CpuSet own = topo.node_cpus(node);
  if (own.empty()) return own;
  const int socket = topo.socket_of_cpu(own.front());
  CpuSet out;
  for (int n : topo.cpu_list("/sys/devices/system/node/possible")) {
    // torch fails on a node without CPUs here (a memory-only or CXL node); it has none to give.
    CpuSet cpus = n == node ? own : topo.node_cpus(n);
    if (cpus.empty() || topo.socket_of_cpu(cpus.front()) != socket) continue;
    CpuSet merged;
    std::set_union(out.begin(), out.end(), cpus.begin(), cpus.end(), std::back_inserter(merged));
    out = std::move(merged);
  }
  return out;
}

/// The node's physical cores split evenly over its GPUs, the first ones getting one more.
CpuSet exclusive_cpus(const Topology& topo, int node, int device) {
  const auto devices = topo.devices_on(node);
  const int nth = static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  const int ndev = static_cast<int>(devices.size());
  auto cores = group_by(topo.node_cpus(node), [&](int cpu) {
    const auto siblings = topo.cpu_list(topo.cpu_dir(cpu) + "/topology/thread_siblings_list");
    return siblings.empty() ? cpu : std::min(cpu, siblings.front());
  });
  const int ncores = static_cast<int>(cores.size());
  if (ncores < ndev) {
    throw Missing{"NUMA node " + std::to_string(node) + " has " + std::to_string(ncores) + " physical cores for " +
                  std::to_string(ndev) + " GPUs"};
  }
  const int per = ncores / ndev, extra = ncores % ndev;
  const int start = nth * per + std::min(nth, extra);
  const int end = start + per + (nth < extra ? 1 : 0);
  CpuSet out;
  auto it = std::next(cores.begin(), start);
  for (int i = start; i < end; ++i, ++it) out.insert(out.end(), it->second.begin(), it->second.end());
  std::sort(out.begin(), out.end());
  return out;
}

/// One last-level cache's CPUs on the node: the biggest first, round-robin over the node's GPUs.
CpuSet core_complex_cpus(const Topology& topo, int node, int device) {
  const auto devices = topo.devices_on(node);
  const int nth = static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  auto caches = group_by(topo.node_cpus(node), [&](int cpu) { return topo.last_level_cache(cpu).front(); });
  if (caches.empty()) return {};
  std::vector<std::pair<int, CpuSet>> order(caches.begin(), caches.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return order[nth % order.size()].second;
}

}  // namespace

SysfsRead sysfs_under(std::string root) {
  return [root = std::move(root)](const std::string& path) -> std::optional<std::string> {
    std::ifstream in(root + path);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return std::nullopt;
    return text.str();
  };
}

CpuSet current_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CpuSet cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::optional<CpuSet> parse_cpu_list(std::string_view text) {
  CpuSet cpus;
  const auto trimmed = strip(text);
  if (trimmed.empty()) return cpus;
  for (const auto& part : text::split(trimmed, ',')) {
    const auto dash = part.find('-');
    auto first = text::to_long(text::trim(part.substr(0, dash)));
    auto last = dash == std::string::npos ? first : text::to_long(text::trim(part.substr(dash + 1)));
    if (!first || !last || *first < 0 || *last < *first || *last > 1 << 20) return std::nullopt;
    for (long c = *first; c <= *last; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const CpuSet& cpus) { return text::ranges(cpus); }

std::string sysfs_pci_address(unsigned domain, unsigned bus, unsigned device) {
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.0", domain, bus, device);
  return out;
}

Result<CpuSet> numa_cpus(const NumaQuery& q, const SysfsRead& read) {
  if (q.device < 0 || q.device >= static_cast<int>(q.device_pci.size())) return fail("no GPU for this worker");
  try {
    const Topology topo(q, read);
    const int node = topo.node_of_device(q.device);
    CpuSet cpus;
    if (q.mode == "node") {
      cpus = topo.node_cpus(node);
    } else if (q.mode == "socket") {
      cpus = socket_cpus(topo, node);
    } else if (q.mode == "exclusive") {
      cpus = exclusive_cpus(topo, node, q.device);
    } else if (q.mode == "core-complex") {
      cpus = core_complex_cpus(topo, node, q.device);
    } else {
      return fail("unknown mode '" + q.mode + "'");
    }
    if (cpus.empty()) return fail("NUMA node " + std::to_string(node) + " has no CPU that dtlaunch may use");
    return cpus;
  } catch (const Missing& m) {
    return fail(m.why);
  }
}

}  // namespace dtl::node
