// Everything a user can ask of `dtlaunch`, as parsed from flags and PET_* variables, before any
// look at the machine (GPUs, ports, files): the launcher resolves it into a plan.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/printable.h"
#include "config/setting.h"

namespace dtl::config {

/// `--nproc_per_node`: a count, or a word resolved against the machine.
struct NprocSpec {
  /// gpu_or_one: accelerate launch given no num_processes (one per GPU, else one); never typed.
  enum class Kind { count, gpu, cpu, auto_, gpu_or_one } kind = Kind::count;
  int count = 1;
};

/// torchrun's `Std`: which of a worker's streams go to files (`--redirects`, `--tee`).
enum class Streams : int { none = 0, out = 1, err = 2, both = 3 };

/// A `--redirects`/`--tee` value: one setting for all local ranks, or `rank:streams` pairs.
struct StreamsSpec {
  Streams all = Streams::none;
  std::map<int, Streams> per_rank;
  Streams for_rank(int local_rank) const {
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? all : it->second;
  }
};

/// Which GPUs a worker sees through CUDA_VISIBLE_DEVICES.
enum class GpuVisibility {
  per_worker,  ///< each worker sees only its own GPU (as cuda:0)
  all,         ///< every worker sees every selected GPU (torchrun's behaviour)
};

/// `--rdzv_conf k=v,...`: torchrun's keys; dtlaunch's liveness defaults notice a lost node in 2 s.
struct RdzvConf {
  double join_timeout_s = 600;     ///< c10d's `join_timeout`
  double static_timeout_s = 900;   ///< the static backend's `timeout` (torchrun's default)
  double last_call_timeout_s = 30;
  double close_timeout_s = 30;
  double keep_alive_interval_s = 0.5;
  int keep_alive_max_attempt = 3;
  std::optional<bool> is_host;  ///< unset: host when the endpoint is one of this machine's addresses

  /// How long a node waits for the round to form, under the backend in use.
  double join_timeout(bool static_backend) const { return static_backend ? static_timeout_s : join_timeout_s; }
};

/// Where a setting's value came from: the flag as typed, a variable, the scheduler that started
/// dtlaunch (config/cluster_env.h), a config file's key, or the default. Errors and warnings name
/// it, so that they point at what the user really wrote.
struct Source {
  enum class Kind { default_, flag, env, detected, file } kind = Kind::default_;
  /// "--nproc-per-node", "PET_NPROC_PER_NODE", "SLURM_STEP_NUM_NODES", "cfg.yaml:3:17: nproc_per_node";
  /// default: "--name"
  std::string where;
  std::string note;   ///< how a file's keys became the value (accelerate's num_processes), or ""

  /// "--where=value" for a flag or the default, else "name=value (from where[ (note)])".
  std::string describe(const std::string& name, const std::string& value) const {
    if (kind == Kind::flag || kind == Kind::default_) return where + "=" + printable(value);
    return name + "=" + printable(value) + " (from " + where + (note.empty() ? "" : " (" + note + ")") + ")";
  }
};

/// What `accelerate launch` would make of the run, for the variables it gives the workers
/// (config/accelerate.h). Settings shared with torchrun (num_processes, mixed_precision, ...) live
/// in LaunchOptions' own fields.
struct AccelerateOptions {
  bool launch = false;   ///< `dtlaunch launch` or an accelerate file: the workers get accelerate launch's variables
  bool chosen = false;   ///< a file's distributed_type or a flag (--multi_gpu, --use_fsdp, ...) chose the launcher
  bool file = false;     ///< the config file in effect is accelerate's
  /// accelerate launch's --cpu (its args.cpu): dtlaunch's use_cpu given as a flag, PET_USE_CPU or in
  /// dtlaunch's own file; never ACCELERATE_USE_CPU (which accelerate launch does not read) nor an
  /// accelerate file's key. It alone makes a DeepSpeed, FSDP or multi-GPU run a CPU one.
  bool cpu_flag = false;
  /// accelerate launch's args.use_cpu: the file's key when there is a file, else --cpu. With --cpu it
  /// makes ACCELERATE_USE_CPU and KMP_*, and alone it spreads the cores over the processes.
  bool use_cpu = false;
  bool physical_gpu_ids = false;  ///< gpu_ids came in accelerate's spelling or file: physical ids
  std::vector<std::string> deepspeed_fields;  ///< the file's deepspeed_config keys (ACCELERATE_CONFIG_DS_FIELDS)
  std::map<std::string, std::string> values;  ///< accelerate's own settings by name, as given
};

/// Many nodes from one command: the hosts, and how ssh reaches them (fanout/fanout.h).
struct FanoutOptions {
  std::string hostfile;               ///< DeepSpeed's hostfile (config/hostfile.h)
  std::string hosts;                  ///< `h1:4,h2:4`
  std::string include, exclude;       ///< DeepSpeed's filters, `h1@h2:0,2`
  std::string ssh_command = "ssh";    ///< split as a shell would (`ssh -F cfg -i key`)
  int ssh_port = 0;                   ///< 0: ssh's own default
  std::vector<std::string> exports;   ///< NAME or NAME=VALUE, for every node's agent
  std::string remote_dtlaunch = "dtlaunch";  ///< the agents' dtlaunch, on the remote PATH or a path
  /// In deepspeed's runner's place (`dtlaunch deepspeed`, accelerate's DeepSpeed over pdsh...): every
  /// host also gets ~/.deepspeed_env's and ./.deepspeed_env's variables, and PYTHONPATH starting
  /// with the working directory, as that runner sends them (accelerate's own PYTHONPATH under
  /// accelerate launch, which overrides it through ./.deepspeed_env).
  bool deepspeed_runner = false;
  /// This process is one host's agent of a fan-out (`dtlaunch fanout-node ...`): it never fans out itself,
  /// gives its workers /dev/null as stdin, and stops when the launching side closes its stdin.
  bool agent = false;
  bool wanted() const { return !agent && (!hostfile.empty() || !hosts.empty()); }
};

struct LaunchOptions {
  NprocSpec nproc_per_node;
  int min_nodes = 1;  ///< --nnodes N or MIN:MAX
  int max_nodes = 1;
  int node_rank = 0;
  std::string rdzv_backend = "static";  ///< static or c10d
  std::string rdzv_endpoint;            ///< host[:port]; static: master_addr:master_port
  RdzvConf rdzv_conf;
  std::string local_addr;               ///< this node's address for its workers; empty: as the server sees it
  std::string rdzv_token;               ///< --rdzv_token or DTLAUNCH_RDZV_TOKEN; empty: unauthenticated
  std::string rdzv_token_file;
  bool standalone = false;
  /// `--launcher`: start every node's agent from here (`slurm`: through srun); empty: this node only.
  std::string launcher;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  ///< 0: pick a free port
  /// The agent (group rank 0's, or the rendezvous host's) serves the workers' c10d store on
  /// master_port or the rendezvous port, as torchrun 2.x; false: worker rank 0 hosts it.
  bool agent_store = true;
  int max_restarts = 0;
  std::string role = "default";
  bool no_python = false;
  bool module = false;
  bool run_path = false;  ///< torchrun's --run-path: the script through runpy.run_path
  std::string log_dir;  ///< empty: a temporary directory
  StreamsSpec redirects;
  StreamsSpec tee;
  std::optional<std::set<int>> local_ranks_filter;
  std::string log_line_prefix_template = "[${role_name}${local_rank}]:";
  /// torchrun's --duplicate_std{out,err}_filters: tee'd lines holding any of these also go to
  /// attempt_N/filtered_std{out,err}.log.
  std::vector<std::string> duplicate_stdout_filters, duplicate_stderr_filters;
  bool dedup_lines = false;  ///< identical console lines of several ranks printed once, led by their ranks
  std::optional<int> metrics_port;         ///< serve this node's figures to Prometheus here; unset: no server
  std::string metrics_addr = "127.0.0.1";  ///< the address it listens on
  /// torchrun's --numa_binding mode (node, socket, exclusive, core-complex); empty: no binding.
  std::string numa_binding;
  bool virtual_local_rank = false;  ///< LOCAL_RANK=0 for every worker, which sees only its own GPU
  /// The `--local-rank=N` argument that torch.distributed.launch (without --use_env) and deepspeed
  /// (without --no_local_rank) put right after the script.
  enum class LocalRankArg {
    none,
    torch_version,  ///< --local-rank=N, or --local_rank=N where the machine's torch is 1.x
    underscore,     ///< --local_rank=N, deepspeed's
  } local_rank_arg = LocalRankArg::none;
  bool use_env = false;
  bool no_local_rank = false;
  bool deepspeed_variables = false;  ///< CROSS_RANK, CROSS_SIZE, LOCAL_SIZE, as deepspeed's launcher gives
  double shutdown_timeout_s = 30;
  double hang_timeout_s = 600;  ///< 0: no watch for hangs
  bool on_hang_fail = false;    ///< --on_hang=fail: a hang stops the workers as the suspect's failure
  std::vector<int> signals_to_handle;  ///< signal numbers
  bool job_cgroup = true;              ///< the workers in a cgroup v2 of their own, where one can be made
  std::string run_id = "none";
  std::string node_name;  ///< this node in failure reports; empty: the machine's host name
  FanoutOptions fanout;
  std::optional<std::vector<int>> gpu_ids;
  std::optional<int> fake_gpus;
  GpuVisibility gpu_visibility = GpuVisibility::per_worker;
  std::string program;
  std::vector<std::string> program_args;

  // What accelerate's users set and their scripts read (see worker_variables).
  std::string mixed_precision;  ///< no, fp16, bf16 or fp8, for ACCELERATE_MIXED_PRECISION; empty: not set
  bool use_cpu = false;         ///< a CPU job: the machine's GPUs are not used (ACCELERATE_USE_CPU)
  bool debug = false;           ///< ACCELERATE_DEBUG_MODE: accelerate checks collective operations
  /// The config file's `env:` entries that no inherited variable overrides, in file order.
  std::vector<std::pair<std::string, std::string>> extra_env;
  AccelerateOptions accelerate;
  std::string config_file;  ///< the config file in effect; empty: none
  /// Where each setting's value came from; a setting missing here has its default.
  std::map<Setting, Source> sources;

  /// Where setting `s` came from (a default-kind Source when it was not set).
  Source source(Setting s) const {
    auto it = sources.find(s);
    return it == sources.end() ? Source{Source::Kind::default_, "--" + setting_name(s), ""} : it->second;
  }
  /// How an error names setting `s` whose value is `value`: "--name=value" when it came from the
  /// command line or the default, else "name=value (from <where>)".
  std::string named(Setting s, const std::string& value) const { return source(s).describe(setting_name(s), value); }
  /// Whether setting `s` was typed here: a flag or a variable of this process, not a file or a default.
  bool typed(Setting s) const {
    const auto k = source(s).kind;
    return k == Source::Kind::flag || k == Source::Kind::env;
  }
};

/// The variables a launch in dtlaunch's own terms adds to the workers' inherited environment (the plan
/// carries them): `env:` entries and ACCELERATE_MIXED_PRECISION / ACCELERATE_USE_CPU /
/// ACCELERATE_DEBUG_MODE. A launch in accelerate's terms gets config/accelerate.h's instead.
inline std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchOptions& o) {
  auto vars = o.extra_env;
  if (!o.mixed_precision.empty()) vars.emplace_back("ACCELERATE_MIXED_PRECISION", o.mixed_precision);
  if (o.use_cpu) vars.emplace_back("ACCELERATE_USE_CPU", "true");
  if (o.debug) vars.emplace_back("ACCELERATE_DEBUG_MODE", "true");
  return vars;
}

}  // namespace dtl::config
