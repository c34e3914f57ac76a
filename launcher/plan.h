// From what the user asked (LaunchOptions) and what the machine has (HostFacts) to what will run
// (LaunchPlan): every check that can fail before a worker starts happens here.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/posix.h"
#include "config/launch_options.h"
#include "base/env.h"
#include "node/gpus.h"
#include "node/numa.h"
#include "node/spawn.h"
#include "launcher/worker_env.h"
#include "rendezvous/ports.h"

namespace dtl::launcher {

/// Asks `python` which torch it would import, without importing it (about 30 ms).
std::optional<std::string> installed_torch_version(const std::string& python);

struct HostFacts {
  node::GpuInventory gpus;
  int cpu_count = 1;
  EnvLookup env;
  std::function<Result<int>(const std::string& addr, int port)> reserve_port;
  int physical_cores = 0;  ///< 0: counted from /sys when an accelerate CPU run needs it
  /// The file system as the plan sees it: a PATH lookup as execvp does it, and whether a path exists.
  std::function<std::optional<std::string>(const std::string& name, const std::string& path_env)> find_program =
      posix::find_executable;
  std::function<bool(const std::string& path)> exists = posix::path_exists;
  std::function<std::optional<std::string>(const std::string& path)> file_kind = posix::file_kind;
  /// The torch version that the interpreter at `python` imports ("2.15.0+cu132"), or nullopt.
  std::function<std::optional<std::string>(const std::string& python)> torch_version = installed_torch_version;
  /// The NUMA topology for --numa_binding, and the CPUs dtlaunch itself may run on.
  node::SysfsRead read_sysfs = node::sysfs_under("");
  std::function<node::CpuSet()> own_cpus = node::current_cpus;
};

/// Distinct (package, core) pairs under /sys/devices/system/cpu, as psutil's cpu_count(logical=False);
/// `fallback` when /sys does not say.
int physical_core_count(int fallback);

/// Where this node serves its figures to Prometheus (--metrics_port, --metrics_addr).
struct MetricsListen {
  std::string addr;
  int port = 0;
  std::string called;  ///< the setting as the user gave it, for messages
};

struct LaunchPlan {
  std::string title;                ///< the program as the user named it, for the failure summary
  std::string exec_path;            ///< what is exec'd (python, or the program itself)
  std::vector<std::string> argv;    ///< argv[0] included; ${local_rank} still to substitute
  int nproc = 1;
  GroupEnv group;                   ///< restart_count is filled in per attempt
  std::vector<std::optional<std::string>> cuda_visible_devices;  ///< per local rank
  std::vector<node::CpuSet> cpus;  ///< per local rank, from --numa_binding; empty: no binding
  /// The GPU each local rank computes on (`dtlaunch top`, the metrics); empty, or nullopt: none.
  std::vector<std::optional<node::Gpu>> worker_gpus;
  std::string gpu_source;  ///< node::GpuInventory's: "fake" GPUs have no figures
  std::string prefix_template;
  /// Tee'd lines holding any of these also go to attempt_N/filtered_std{out,err}.log.
  std::vector<std::string> stdout_filters, stderr_filters;
  config::StreamsSpec redirects;
  config::StreamsSpec tee;
  std::optional<std::set<int>> console_filter;
  std::string log_dir;
  std::string log_dir_called = "--log_dir";  ///< what messages call log_dir: the flag, or where it came from
  double shutdown_timeout_s = 30;
  double hang_timeout_s = 0;  ///< 0: no watch (watch/hang_state.h)
  bool on_hang_fail = false;
  bool python_workers = true;  ///< how a hung rank's stack is read (watch/hang_watch.h)
  std::vector<int> signals;
  bool job_cgroup = true;  ///< try to put the workers in a cgroup v2 of their own
  bool dedup_lines = false;  ///< identical console lines of several ranks printed once (launcher/line_groups.h)
  std::optional<MetricsListen> metrics;
  std::vector<std::string> notices;  ///< one-line notes for the user before the start

  /// Whether any worker stream goes to a per-rank file (redirects, tee, or hidden by the filter).
  bool writes_log_files() const;
};

/// The plan, or why there is none (exit code 2 for bad input, 127 for a missing program).
Result<LaunchPlan> make_plan(const config::LaunchOptions& options, const HostFacts& host);

/// Whether the launch goes through the rendezvous (several nodes, or c10d with an endpoint) rather
/// than straight to the workers.
bool is_multi_node(const config::LaunchOptions& options);

/// `${local_rank}` in the program's arguments, as torchrun substitutes it.
std::vector<std::string> substitute_local_rank(const std::vector<std::string>& argv, int local_rank);

}  // namespace dtl::launcher
