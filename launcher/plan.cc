#include "launcher/plan.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <unistd.h>

#include "base/posix.h"
#include "base/printable.h"
#include "config/accelerate.h"
#include "config/hostfile.h"
#include "base/text.h"
#include "launcher/failure_summary.h"
#include "launcher/line_prefixer.h"
#include "launcher/rdzv_endpoint.h"
#include "node/spawn.h"

namespace dtl::launcher {
namespace {

using config::GpuVisibility;
using config::Setting;
using config::NprocSpec;

/// The environment as the workers will inherit it: the plan's variables over dtlaunch's own.
EnvLookup with_variables(const EnvPairs& variables, const EnvLookup& inherited) {
  return [&variables, inherited](const std::string& name) -> std::optional<std::string> {
    for (const auto& [k, v] : variables) {
      if (k == name) return v;
    }
    return inherited(name);
  };
}

/// The GPU each worker computes on, for `dtlaunch top` and the metrics: its cuda:0 when it sees one
/// GPU, else cuda:LOCAL_RANK of those it sees (`selected` when its CUDA_VISIBLE_DEVICES is left alone).
std::vector<std::optional<node::Gpu>> worker_gpus(const std::vector<std::optional<std::string>>& visible,
                                                  const std::vector<std::string>& selected,
                                                  const node::GpuInventory& inventory, GpuVisibility visibility) {
  std::vector<std::optional<node::Gpu>> out(visible.size());
  for (size_t lr = 0; lr < visible.size(); ++lr) {
    const auto seen = visible[lr] ? text::split(*visible[lr], ',') : selected;
    if (seen.empty()) continue;
    const std::string& entry = seen[visibility == GpuVisibility::per_worker ? 0 : lr % seen.size()];
    for (const auto& g : inventory.gpus) {
      if (entry.rfind("GPU-", 0) == 0 ? g.uuid.rfind(entry, 0) == 0 : entry == std::to_string(g.index)) out[lr] = g;
    }
  }
  return out;
}

/// The sysfs PCI address of selection entry `entry` (an index or a GPU- UUID prefix), where known.
std::optional<std::string> pci_of(const std::string& entry, const std::vector<node::Gpu>& all) {
  for (const auto& g : all) {
    const bool same = entry.rfind("GPU-", 0) == 0 ? g.uuid.rfind(entry, 0) == 0 : entry == std::to_string(g.index);
    if (same && !g.pci.empty()) return g.pci;
  }
  return std::nullopt;
}

/// --numa_binding: each worker's CPUs near its GPU (gpus[local rank % GPUs]), as torchrun's.
Status plan_numa(const config::LaunchOptions& o, const HostFacts& host, const std::vector<std::string>& gpus,
                 bool use_gpus, LaunchPlan& plan) {
  const std::string called = o.named(Setting::numa_binding, o.numa_binding);
  if (!use_gpus) return fail(called + ": binds each worker near its GPU, but the workers have none");
  node::NumaQuery query{o.numa_binding, {}, 0, host.own_cpus()};
  for (const auto& entry : gpus) {
    auto pci = pci_of(entry, host.gpus.gpus);
    if (!pci) {
      const auto& source = host.gpus.source;
      return fail(called + ": the PCI address of GPU " + entry + " is unknown (" +
                  (source == "nvml"   ? std::string("NVML did not say")
                   : source == "fake" ? std::string("--fake_gpus")
                                      : "GPUs from " + source + "; only NVML gives it") +
                  ")");
    }
    query.device_pci.push_back(*pci);
  }
  std::vector<std::string> shown;
  for (int lr = 0; lr < plan.nproc; ++lr) {
    query.device = lr % static_cast<int>(gpus.size());
    auto cpus = node::numa_cpus(query, host.read_sysfs);
    if (!cpus) {
      return fail(called + ": local rank " + std::to_string(lr) + " (GPU " + query.device_pci[query.device] +
                  "): " + cpus.error().message);
    }
    plan.cpus.push_back(std::move(*cpus));
    shown.push_back(std::to_string(lr) + ": " + node::format_cpu_list(plan.cpus.back()));
  }
  plan.notices.push_back("numa_binding=" + o.numa_binding + ": CPUs by local rank: " + text::join(shown, ", "));
  return {};
}

std::string random_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> hex(0, 15);
  std::string id;
  for (int i = 0; i < 16; ++i) id += "0123456789abcdef"[hex(rd)];
  return id;
}

}  // namespace

int physical_core_count(int fallback) {
  std::set<std::pair<std::string, std::string>> cores;
  std::error_code ec;
  for (const auto& cpu : std::filesystem::directory_iterator("/sys/devices/system/cpu", ec)) {
    const std::string name = cpu.path().filename().string();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 || !std::isdigit(static_cast<unsigned char>(name[3]))) continue;
    std::string package, core;
    std::ifstream(cpu.path() / "topology/physical_package_id") >> package;
    std::ifstream(cpu.path() / "topology/core_id") >> core;
    if (!core.empty()) cores.emplace(package, core);
  }
  return cores.empty() ? fallback : static_cast<int>(cores.size());
}

std::vector<std::string> substitute_local_rank(const std::vector<std::string>& argv, int local_rank) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (const auto& a : argv) {
    out.push_back(text::replace_all(a, "${local_rank}", std::to_string(local_rank)));
  }
  return out;
}

bool LaunchPlan::writes_log_files() const {
  auto any = [](const config::StreamsSpec& s) {
    bool set = s.all != config::Streams::none;
    for (const auto& [rank, streams] : s.per_rank) set |= streams != config::Streams::none;
    return set;
  };
  return any(redirects) || any(tee) || console_filter.has_value() || !stdout_filters.empty() ||
         !stderr_filters.empty();
}

bool is_multi_node(const config::LaunchOptions& o) {
  return !o.standalone && (o.max_nodes > 1 || (o.rdzv_backend == "c10d" && !o.rdzv_endpoint.empty()));
}

namespace {

/// torchrun's --run-path worker (run.py's run_script_path under elastic's `record`): the script
/// through runpy.run_path, with the script's folder first on sys.path as for `python script.py`; an
/// uncaught exception writes torch's error file when torch imports.
constexpr const char* kRunPathMain =
    "import os, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "try:\n"
    "    from torch.distributed.elastic.multiprocessing.errors import record\n"
    "except ImportError:\n"
    "    record = lambda fn: fn\n"
    "record(lambda: runpy.run_path(sys.argv[0], run_name='__main__'))()\n";

/// What runs: the program itself (--no_python), or python on the script or module; 127 when it is
/// not there.
Status plan_command(const config::LaunchOptions& o, const EnvLookup& env, const HostFacts& host, LaunchPlan& plan) {
  const std::string path_env = env("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  plan.title = o.program;
  if (o.no_python && !o.run_path) {  // torchrun: --run-path wins over --no-python and --module
    auto exe = host.find_program(o.program, path_env);
    if (!exe) {
      if (o.program.find('/') != std::string::npos && host.exists(o.program)) {
        return fail("'" + o.program + "' is not an executable file");
      }
      return fail("program '" + o.program + "' not found" + (o.program.find('/') == std::string::npos ? " in PATH" : ""),
                  127);
    }
    plan.exec_path = *exe;
    plan.argv.push_back(o.program);
  } else {
    std::string python = env("PYTHON_EXEC").value_or("python3");
    auto exe = host.find_program(python, path_env);
    if (!exe) return fail("python interpreter '" + python + "' not found (set PYTHON_EXEC, or use --no_python)", 127);
    if ((o.run_path || !o.module) && !host.exists(o.program)) {
      return fail("script '" + o.program + "' not found (use --no_python to run a program from PATH)", 127);
    }
    plan.exec_path = *exe;
    plan.argv = {python, "-u"};
    if (o.run_path) {
      plan.argv.insert(plan.argv.end(), {"-c", kRunPathMain});
    } else if (o.module) {
      plan.argv.push_back("-m");
    }
    plan.argv.push_back(o.program);
  }
  if (o.local_rank_arg != config::LaunchOptions::LocalRankArg::none) {
    // torch.distributed.launch's spelling follows the torch the workers import: 2.x --local-rank.
    bool underscore = o.local_rank_arg == config::LaunchOptions::LocalRankArg::underscore;
    if (!underscore) {
      const std::string python = env("PYTHON_EXEC").value_or("python3");
      auto exe = host.find_program(python, path_env);
      auto version = exe ? host.torch_version(*exe) : std::nullopt;
      underscore = version && version->rfind("1.", 0) == 0;
    }
    plan.argv.push_back(underscore ? "--local_rank=${local_rank}" : "--local-rank=${local_rank}");
  }
  plan.argv.insert(plan.argv.end(), o.program_args.begin(), o.program_args.end());
  return {};
}

/// torchrun's expiration timers (watch/file_timers.h): their FIFO takes the place of what is at
/// TORCHELASTIC_TIMER_FILE, as in torch's FileTimerServer, which is said; a folder there, or no
/// folder to make it in, is bad input.
Status plan_timer_file(const HostFacts& host, LaunchPlan& plan) {
  if (host.env("TORCHELASTIC_ENABLE_FILE_TIMER") != "1") return {};
  const auto file = host.env("TORCHELASTIC_TIMER_FILE");
  if (!file) return {};  // one in the run's log folder
  const std::string shown = "TORCHELASTIC_TIMER_FILE=" + printable(*file, 200);
  if (file->empty()) {
    return fail("TORCHELASTIC_TIMER_FILE is empty: name the timers' FIFO, or unset it for one in the run's log folder");
  }
  const auto kind = host.file_kind(*file);
  if (kind == "a folder") {
    return fail(shown + " names a folder: the workers' expiration timers need a FIFO there (name a path that is "
                        "not there yet, or unset it for one in the run's log folder)");
  }
  if (kind) {
    plan.notices.push_back("warning: " + shown + " is " + *kind +
                           " already there: dtlaunch deletes it and makes the timers' FIFO in its place, as torch's "
                           "FileTimerServer does");
    return {};
  }
  const auto folder = std::filesystem::path(*file).parent_path().string();
  if (!folder.empty() && host.file_kind(folder + "/.") != "a folder") {  // "/.": a link to a folder is one
    return fail(shown + ": its folder " + printable(folder, 200) + " is not there");
  }
  return {};
}

}  // namespace

std::optional<std::string> installed_torch_version(const std::string& python) {
  static const char* kScript =
      "import importlib.util as u, os, re\n"
      "s = u.find_spec('torch')\n"
      "t = open(os.path.join(os.path.dirname(s.origin), 'version.py')).read() if s and s.origin else ''\n"
      "m = re.search(r'^__version__[^=]*=\\s*[\\'\"]([^\\'\"]+)', t, re.M)\n"
      "print(m.group(1) if m else '')\n";
  auto out = posix::run_program({python, "-c", kScript}, std::chrono::seconds(10));
  if (out.exit_code != 0 || out.lines.empty() || out.lines.front().empty()) return std::nullopt;
  return out.lines.front();
}

Result<LaunchPlan> make_plan(const config::LaunchOptions& o, const HostFacts& host) {
  if (auto allowed = config::refuse_host_settings_without_hosts(o); !allowed) return tl::unexpected(allowed.error());
  LaunchPlan plan;
  plan.group.variables = config::worker_variables(o);
  const EnvLookup env = with_variables(plan.group.variables, host.env);
  if (auto command = plan_command(o, env, host, plan); !command) return tl::unexpected(command.error());
  if (auto timers = plan_timer_file(host, plan); !timers) return tl::unexpected(timers.error());

  // GPUs and the number of workers.
  // deepspeed's slots on a machine without GPUs (its CPU accelerator) are numbers that nothing checks.
  const bool deepspeed_without_gpus = o.deepspeed_variables && host.gpus.gpus.empty();
  // accelerate's gpu_ids are physical ids: an inherited CUDA_VISIBLE_DEVICES does not narrow them.
  using Gpus = std::vector<std::string>;
  auto selection = deepspeed_without_gpus
                       ? Result<Gpus>(Gpus{})
                       : node::select_gpus(host.gpus.gpus, o.accelerate.physical_gpu_ids ? std::nullopt : env("CUDA_VISIBLE_DEVICES"),
                                     o.gpu_ids, o.source(Setting::gpu_ids).where);
  if (!selection) return tl::unexpected(selection.error());
  const Gpus& gpus = *selection;
  const int ngpus = static_cast<int>(gpus.size());
  switch (o.nproc_per_node.kind) {
    case NprocSpec::Kind::count: plan.nproc = o.nproc_per_node.count; break;
    case NprocSpec::Kind::cpu: plan.nproc = host.cpu_count; break;
    case NprocSpec::Kind::auto_: plan.nproc = ngpus > 0 ? ngpus : host.cpu_count; break;
    case NprocSpec::Kind::gpu_or_one: plan.nproc = ngpus > 0 ? ngpus : 1; break;
    case NprocSpec::Kind::gpu:
      if (ngpus == 0) {
        return fail(o.named(Setting::nproc_per_node, "gpu") + " but no GPU is visible (" +
                    (host.gpus.gpus.empty() ? std::string("none found through NVML or nvidia-smi")
                                            : "CUDA_VISIBLE_DEVICES/--gpu_ids select none") +
                    "; --fake_gpus N pretends to have N)");
      }
      plan.nproc = ngpus;
      break;
  }
  plan.cuda_visible_devices.assign(plan.nproc, std::nullopt);
  const bool use_gpus = ngpus > 0 && o.nproc_per_node.kind != NprocSpec::Kind::cpu;
  if (use_gpus) {
    const std::string how = host.gpus.source == "fake" ? "fake GPUs" : "GPUs (" + host.gpus.source + ")";
    if (o.gpu_visibility == GpuVisibility::per_worker) {
      for (int i = 0; i < plan.nproc; ++i) plan.cuda_visible_devices[i] = gpus[i % ngpus];
      plan.notices.push_back(std::to_string(plan.nproc) + " workers on " + std::to_string(ngpus) + " " + how +
                             "; gpu_visibility=per_worker: each worker sees only its own GPU, as cuda:0 "
                             "(--gpu_visibility=all for scripts that pick cuda:LOCAL_RANK)");
      if (plan.nproc > ngpus) {
        plan.notices.push_back("warning: " + std::to_string(plan.nproc) + " workers share " + std::to_string(ngpus) +
                               " GPUs round-robin (NCCL refuses two ranks on one GPU)");
      }
    } else {
      // Fake GPUs are narrowed to themselves, except for accelerate, which names only its gpu_ids.
      // deepspeed's launch.py narrows to the node's slots: the first N GPUs (or the chosen ones).
      const bool narrowed = o.deepspeed_variables || o.gpu_ids || (host.gpus.source == "fake" && !o.accelerate.launch);
      const std::vector<std::string> seen(gpus.begin(), o.deepspeed_variables ? gpus.begin() + std::min(plan.nproc, ngpus) : gpus.end());
      for (auto& v : plan.cuda_visible_devices) v = narrowed ? std::optional<std::string>(text::join(seen)) : std::nullopt;
      plan.notices.push_back(std::to_string(plan.nproc) + " workers on " + std::to_string(ngpus) + " " + how +
                             "; gpu_visibility=all: every worker sees GPUs " + text::join(seen) +
                             " and picks cuda:LOCAL_RANK (torchrun's behaviour)");
    }
  }
  if (use_gpus) plan.worker_gpus = worker_gpus(plan.cuda_visible_devices, gpus, host.gpus, o.gpu_visibility);
  if (deepspeed_without_gpus && o.gpu_visibility == GpuVisibility::all) {
    // deepspeed's launch.py sets its node's slots without GPUs too: 0..N-1, or the ones --include
    // chose (here --gpu_ids, or the fan-out's PET_GPU_IDS).
    std::vector<std::string> slots;
    for (int i = 0; i < (o.gpu_ids ? static_cast<int>(o.gpu_ids->size()) : plan.nproc); ++i) {
      slots.push_back(std::to_string(o.gpu_ids ? (*o.gpu_ids)[i] : i));
    }
    plan.cuda_visible_devices.assign(plan.nproc, text::join(slots));
  }
  if (o.virtual_local_rank && !use_gpus) {
    // torchrun's: worker N sees the Nth inherited CUDA_VISIBLE_DEVICES entry, else device N
    const auto inherited = env("CUDA_VISIBLE_DEVICES");
    const auto listed = inherited ? text::split(*inherited, ',') : std::vector<std::string>{};
    for (int lr = 0; lr < plan.nproc; ++lr) {
      if (inherited && lr >= static_cast<int>(listed.size())) {
        return fail("--virtual_local_rank: local_rank " + std::to_string(lr) + " has no GPU in CUDA_VISIBLE_DEVICES=" +
                    *inherited);
      }
      plan.cuda_visible_devices[lr] = inherited ? text::trim(listed[lr]) : std::to_string(lr);
    }
  }
  if (!o.numa_binding.empty()) {
    if (auto bound = plan_numa(o, host, gpus, use_gpus, plan); !bound) return tl::unexpected(bound.error());
  }
  if (o.accelerate.launch) {
    const int cores = host.physical_cores > 0 ? host.physical_cores : physical_core_count(host.cpu_count);
    const config::AccelerateHost facts{host.env, posix::current_directory(), plan.nproc, ngpus, cores};
    plan.group.variables = config::accelerate_variables(o, facts);
    // accelerate's simple launcher (NO, MULTI_CPU, --cpu) runs one process as a plain script, without
    // torchrun's variables, so Accelerator() finds no process group; with more processes dtlaunch
    // starts them all, with torchrun's (where accelerate would need mpirun).
    plan.group.torchrun_contract = plan.nproc > 1 || is_multi_node(o) ||
                                   config::accelerate_launcher(o, facts) != config::AccelerateLauncher::simple;
  }
  if (plan.nproc > 1 && !env("OMP_NUM_THREADS")) {
    plan.notices.push_back("OMP_NUM_THREADS=1 for each worker, to avoid overloading the machine "
                           "(set OMP_NUM_THREADS to choose)");
  }

  // Where rank 0 listens (on several nodes, the rendezvous says), and who the job is. One node of
  // the static backend with --rdzv_endpoint: torch's static handler serves the store there.
  plan.group.master_addr = o.master_addr;
  int master_port = o.master_port;
  if (!is_multi_node(o) && !o.standalone && o.rdzv_backend == "static" && !o.rdzv_endpoint.empty()) {
    auto ep = rdzv_endpoint(o);
    if (!ep) return tl::unexpected(ep.error());
    std::tie(plan.group.master_addr, master_port) = *ep;
  }
  plan.group.agent_store = o.agent_store;
  // torchrun 2.x: one node, the static backend and no port given anywhere is --standalone (a free
  // port, a fresh run id), so that a taken 29500 stops no single-node job.
  const bool auto_standalone = !o.standalone && !is_multi_node(o) && o.rdzv_backend == "static" &&
                               o.rdzv_endpoint.empty() && o.source(Setting::master_port).kind == config::Source::Kind::default_;
  const bool standalone = o.standalone || auto_standalone;
  if (!is_multi_node(o)) {
    int port = standalone ? 0 : master_port;
    auto reserved = host.reserve_port(plan.group.master_addr, port);
    if (!reserved) return tl::unexpected(reserved.error());
    plan.group.master_port = *reserved;
  }
  plan.group.run_id = (standalone && o.run_id == "none") ? random_id() : o.run_id;
  plan.group.role = o.role;
  plan.group.local_world_size = plan.nproc;
  plan.group.world_size = plan.nproc;
  plan.group.max_restarts = o.max_restarts;

  plan.prefix_template = o.log_line_prefix_template;
  plan.stdout_filters = o.duplicate_stdout_filters;
  plan.stderr_filters = o.duplicate_stderr_filters;
  plan.group.virtual_local_rank = o.virtual_local_rank;
  plan.group.deepspeed_variables = o.deepspeed_variables;
  std::vector<std::string> signals;
  for (int sig : o.signals_to_handle) signals.push_back(posix::signal_name(sig));
  plan.group.signals_to_handle = text::join(signals);
  plan.redirects = o.redirects;
  plan.tee = o.tee;
  plan.console_filter = o.local_ranks_filter;
  plan.log_dir = o.log_dir;
  plan.log_dir_called = o.source(Setting::log_dir).where;
  plan.shutdown_timeout_s = o.shutdown_timeout_s;
  plan.hang_timeout_s = o.hang_timeout_s;
  plan.on_hang_fail = o.on_hang_fail;
  plan.python_workers = !o.no_python || o.run_path;
  plan.signals = o.signals_to_handle;
  plan.job_cgroup = o.job_cgroup;
  plan.gpu_source = host.gpus.source;
  plan.dedup_lines = o.dedup_lines;
  if (o.metrics_port) plan.metrics = MetricsListen{o.metrics_addr, *o.metrics_port, o.named(Setting::metrics_port, std::to_string(*o.metrics_port))};
  return plan;
}

}  // namespace dtl::launcher
