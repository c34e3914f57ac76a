#include <catch2/catch.hpp>

#include <map>

#include "config/command_line.h"
#include "node/numa.h"
#include "launcher/plan.h"

using namespace dtl;
using namespace dtl::launcher;
using namespace dtl::node;

namespace {

/// A fake /sys: 2 sockets of 2 NUMA nodes, each node 4 cores of 2 threads (CPU c and c+16), two
/// L3 caches of 2 cores per node, and a memory-only node 4. GPUs 0 and 1 on node 0, GPU 2 on
/// node 1, GPU 3 on node 3.
struct FakeSysfs {
  std::map<std::string, std::string> files;

  FakeSysfs() {
    files["/sys/devices/system/node/possible"] = "0-4\n";
    for (int node = 0; node < 4; ++node) {
      const int a = 4 * node;
      files["/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"] =
          std::to_string(a) + "-" + std::to_string(a + 3) + "," + std::to_string(a + 16) + "-" + std::to_string(a + 19) + "\n";
    }
    files["/sys/devices/system/node/node4/cpulist"] = "\n";
    for (int cpu = 0; cpu < 32; ++cpu) {
      const int core = cpu % 16, l3 = core / 2 * 2;
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
      files[dir + "/topology/thread_siblings_list"] = std::to_string(core) + "," + std::to_string(core + 16) + "\n";
      files[dir + "/topology/physical_package_id"] = std::to_string(core / 8) + "\n";
      cache(dir + "/cache/index0", "Data", 1, std::to_string(core) + "," + std::to_string(core + 16));
      cache(dir + "/cache/index1", "Instruction", 1, std::to_string(core) + "," + std::to_string(core + 16));
      cache(dir + "/cache/index2", "Unified", 2, std::to_string(core) + "," + std::to_string(core + 16));
      cache(dir + "/cache/index3", "Unified", 3,
            std::to_string(l3) + "-" + std::to_string(l3 + 1) + "," + std::to_string(l3 + 16) + "-" + std::to_string(l3 + 17));
    }
    gpu("0000:1b:00.0", "0");
    gpu("0000:1c:00.0", "0");
    gpu("0000:5a:00.0", "1");
    gpu("0000:db:00.0", "3");
  }
  void cache(const std::string& dir, const std::string& type, int level, const std::string& shared) {
    files[dir + "/type"] = type + "\n";
    files[dir + "/level"] = std::to_string(level) + "\n";
    files[dir + "/shared_cpu_list"] = shared + "\n";
  }
  void gpu(const std::string& pci, const std::string& node) { files["/sys/bus/pci/devices/" + pci + "/numa_node"] = node + "\n"; }

  SysfsRead reader() const {
    return [this](const std::string& path) -> std::optional<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return std::nullopt;
      return it->second;
    };
  }
};

CpuSet all_cpus() {
  CpuSet cpus;
  for (int c = 0; c < 32; ++c) cpus.push_back(c);
  return cpus;
}

const std::vector<std::string> kGpus{"0000:1b:00.0", "0000:1c:00.0", "0000:5a:00.0", "0000:db:00.0"};

/// The CPUs as a cpulist, or "error: why".
std::string cpus_for(const FakeSysfs& sys, const std::string& mode, int device, CpuSet allowed = all_cpus(),
                     std::vector<std::string> gpus = kGpus) {
  auto cpus = numa_cpus({mode, std::move(gpus), device, std::move(allowed)}, sys.reader());
  if (!cpus) return "error: " + cpus.error().message;
  return format_cpu_list(*cpus);
}

CpuSet without(CpuSet cpus, std::initializer_list<int> gone) {
  for (int g : gone) std::erase(cpus, g);
  return cpus;
}

}  // namespace

TEST_CASE("cpu lists parse and print as the kernel writes them") {
  CHECK(parse_cpu_list("0-2,4,6-7\n") == CpuSet{0, 1, 2, 4, 6, 7});
  CHECK(parse_cpu_list("5,1-2") == CpuSet{1, 2, 5});
  CHECK(parse_cpu_list("\n") == CpuSet{});
  CHECK_FALSE(parse_cpu_list("1-"));
  CHECK_FALSE(parse_cpu_list("3-1"));
  CHECK_FALSE(parse_cpu_list("a"));
  CHECK_FALSE(parse_cpu_list("-1"));
  CHECK(format_cpu_list({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7");
  CHECK(format_cpu_list({3}) == "3");
  CHECK(format_cpu_list({}).empty());
  CHECK(sysfs_pci_address(0, 0x1b, 0) == "0000:1b:00.0");
}

TEST_CASE("node: every CPU of the GPU's NUMA node that dtlaunch may use") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "node", 0) == "0-3,16-19");
  CHECK(cpus_for(sys, "node", 2) == "4-7,20-23");
  CHECK(cpus_for(sys, "node", 3) == "12-15,28-31");
  CHECK(cpus_for(sys, "node", 2, without(all_cpus(), {5, 21})) == "4,6-7,20,22-23");
}

TEST_CASE("a GPU whose numa_node is -1, as on single-node machines, is on node 0") {
  FakeSysfs sys;
  sys.gpu("0000:5a:00.0", "-1");
  CHECK(cpus_for(sys, "node", 2) == "0-3,16-19");
}

TEST_CASE("socket: every node of the socket holding the GPU's node, a memory-only node skipped") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "socket", 0) == "0-7,16-23");
  CHECK(cpus_for(sys, "socket", 3) == "8-15,24-31");
}

TEST_CASE("exclusive: the node's physical cores split over its GPUs, hyperthreads kept together") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "exclusive", 0) == "0-1,16-17");
  CHECK(cpus_for(sys, "exclusive", 1) == "2-3,18-19");
  CHECK(cpus_for(sys, "exclusive", 2) == "4-7,20-23");  // alone on its node
  // 3 usable cores for 2 GPUs: the first GPU gets the extra one
  CHECK(cpus_for(sys, "exclusive", 0, without(all_cpus(), {3, 19})) == "0-1,16-17");
  CHECK(cpus_for(sys, "exclusive", 1, without(all_cpus(), {3, 19})) == "2,18");
}

TEST_CASE("exclusive with fewer cores than GPUs on the node is refused") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "exclusive", 0, {0, 16}) == "error: NUMA node 0 has 1 physical cores for 2 GPUs");
}

TEST_CASE("core-complex: one last-level cache per GPU, the fullest first, round-robin") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "core-complex", 0) == "0-1,16-17");
  CHECK(cpus_for(sys, "core-complex", 1) == "2-3,18-19");
  CHECK(cpus_for(sys, "core-complex", 3) == "12-13,28-29");
  // with CPU 0 taken away, the other cache has more CPUs and goes first
  CHECK(cpus_for(sys, "core-complex", 0, without(all_cpus(), {0})) == "2-3,18-19");
  CHECK(cpus_for(sys, "core-complex", 1, without(all_cpus(), {0})) == "1,16-17");
}

TEST_CASE("a topology that cannot be read is an error that names the file") {
  FakeSysfs sys;
  CHECK(cpus_for(sys, "node", 0, all_cpus(), {"0000:99:00.0"}) ==
        "error: cannot read /sys/bus/pci/devices/0000:99:00.0/numa_node");
  sys.files.erase("/sys/devices/system/node/node1/cpulist");
  CHECK(cpus_for(sys, "node", 2) == "error: cannot read /sys/devices/system/node/node1/cpulist");
  sys.files["/sys/bus/pci/devices/0000:1b:00.0/numa_node"] = "zero\n";
  CHECK(cpus_for(sys, "node", 0) == "error: /sys/bus/pci/devices/0000:1b:00.0/numa_node: expected a number");
  CHECK(cpus_for(sys, "node", 2, {0, 1}) == "error: cannot read /sys/devices/system/node/node1/cpulist");
  CHECK(cpus_for(sys, "node", 3, {0, 1}) == "error: NUMA node 3 has no CPU that dtlaunch may use");
}

namespace {

/// make_plan over the fake /sys with 4 NVML GPUs at kGpus' addresses.
Result<LaunchPlan> plan_with(const FakeSysfs& sys, std::vector<std::string> args, std::string source = "nvml") {
  dtl::EnvLookup env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "PATH") return "/usr/bin:/bin";
    return std::nullopt;
  };
  auto parsed = config::parse_command_line(args, env);
  if (!parsed) return tl::unexpected(parsed.error());
  GpuInventory gpus{{}, source};
  for (int i = 0; i < 4; ++i) gpus.gpus.push_back(Gpu{i, "GPU-" + std::to_string(i), "x", source == "nvml" ? kGpus[i] : ""});
  HostFacts host{gpus, 32, env, [](const std::string&, int port) -> Result<int> { return port; }};
  host.read_sysfs = sys.reader();
  host.own_cpus = all_cpus;
  host.exists = [](const std::string&) { return true; };
  return make_plan(*parsed->options, host);
}

}  // namespace

TEST_CASE("the plan binds each worker near the GPU it is given") {
  FakeSysfs sys;
  auto p = plan_with(sys, {"--numa_binding=node", "--nproc_per_node=gpu", "--master_port=29500", "x.py"});
  REQUIRE(p);
  const LaunchPlan& plan = *p;
  REQUIRE(plan.cpus.size() == 4);
  CHECK(format_cpu_list(plan.cpus[1]) == "0-3,16-19");
  CHECK(format_cpu_list(plan.cpus[2]) == "4-7,20-23");
  CHECK_THAT(plan.notices, Catch::VectorContains(std::string(
                              "numa_binding=node: CPUs by local rank: 0: 0-3,16-19, 1: 0-3,16-19, 2: 4-7,20-23, "
                              "3: 12-15,28-31")));
  // --gpu_ids 2,3: worker 0 gets GPU 2, and exclusive counts only the GPUs the job may use
  auto narrowed = plan_with(sys, {"--numa_binding=exclusive", "--gpu_ids=1,3", "--nproc_per_node=2", "--master_port=1", "x.py"});
  REQUIRE(narrowed);
  CHECK(format_cpu_list(narrowed->cpus[0]) == "0-3,16-19");
}

TEST_CASE("without --numa_binding no worker is bound") {
  FakeSysfs sys;
  auto p = plan_with(sys, {"--nproc_per_node=2", "--master_port=1", "x.py"});
  if (!p) FAIL(p.error().message);
  CHECK(p->cpus.empty());
}

TEST_CASE("numa_binding refusals are one line that names the setting, before any worker starts") {
  FakeSysfs sys;
  auto refused = [&](std::vector<std::string> args, std::string source = "nvml") {
    args.push_back("x.py");
    auto p = plan_with(sys, std::move(args), std::move(source));
    REQUIRE_FALSE(p);
    CHECK(p.error().exit_code == 2);
    return p.error().message;
  };
  CHECK(refused({"--numa_binding=cpu"}).find("--numa_binding") != std::string::npos);
  CHECK(refused({"--numa_binding=node", "--nproc_per_node=cpu"}) ==
        "--numa_binding=node: binds each worker near its GPU, but the workers have none");
  CHECK(refused({"--numa_binding=socket", "--nproc_per_node=gpu"}, "nvidia-smi") ==
        "--numa_binding=socket: the PCI address of GPU 0 is unknown (GPUs from nvidia-smi; only NVML gives it)");
  sys.files.erase("/sys/devices/system/node/node0/cpulist");
  CHECK(refused({"--numa_binding=node", "--nproc_per_node=2"}) ==
        "--numa_binding=node: local rank 0 (GPU 0000:1b:00.0): cannot read /sys/devices/system/node/node0/cpulist");
}
