#include "config/flags.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

using text::split;
using text::trim;

/// Strict integer: the whole text, in [lo, hi].
long parse_int(const std::string& text, long lo, long hi, const std::string& what) {
  auto v = text::to_long(trim(text));
  if (!v || *v < lo || *v > hi) throw std::invalid_argument("expected " + what);
  return *v;
}

/// A non-empty word, trimmed.
std::string word(const std::string& text, const char* what) {
  std::string t = trim(text);
  if (t.empty()) throw std::invalid_argument(std::string("expected ") + what);
  return t;
}

std::string one_of(const std::string& text, const std::vector<std::string>& words) {
  std::string t = trim(text);
  if (std::find(words.begin(), words.end(), t) == words.end()) {
    throw std::invalid_argument("expected " + text::join(words, " or "));
  }
  return t;
}

double seconds(const std::string& text) {
  double v = text::to_double(trim(text)).value_or(-1);
  if (!(v >= 0) || v > 86400) throw std::invalid_argument("expected seconds >= 0");
  return v;
}

/// A row's choices, for its parser (the table is complete by the time a parser runs).
std::vector<std::string> choices(Setting id);

void accepted(const std::string&, LaunchOptions&) {}  // torchrun's flags that dtlaunch has no use for

const char* kWorkers = "Workers";
const char* kNodes = "Nodes and rendezvous";
const char* kOutput = "Output";
const char* kGpus = "GPUs";
const char* kFanout = "Many nodes from one command";
const char* kAccelerate = "accelerate's settings";

using O = LaunchOptions;
using S = std::string;

const char* kAccLaunch = "accelerate launch";
const char* kAccDynamo = "accelerate: torch dynamo";
const char* kAccFsdp = "accelerate: FSDP";
const char* kAccDeepspeed = "accelerate: DeepSpeed";
const char* kAccFp8 = "accelerate: fp8 (with mixed_precision fp8)";

const std::vector<std::string> kDynamoBackends = {
    "NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS", "OFI", "FX2TRT",
    "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE", "TORCHXLA_TRACE_ONCE", "TVM", "HPU_BACKEND", "NEURON"};

void integer(const S& t, O&) {
  if (!trim(t).empty()) parse_int(t, -(1L << 40), 1L << 40, "an integer");
}

void switch_value(const S& t, O&) { parse_bool(t); }

/// torchrun's comma_separated_list: items split at ',', where ",," stands for a comma.
std::vector<std::string> filter_list(const S& t) {
  std::vector<std::string> items;
  if (t.empty()) return items;
  std::string item;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ',' && i + 1 < t.size() && t[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (t[i] == ',') {
      items.push_back(item);
      item.clear();
    } else {
      item += t[i];
    }
  }
  items.push_back(item);
  return items;
}

/// A run id names the log folder, `<run_id>_XXXXXX`, which file systems cap at 255 bytes.
std::string run_id(const S& t) {
  if (t.size() > 248) throw std::invalid_argument("expected at most 248 bytes (it names the log folder)");
  return t;
}

void number(const S& t) {
  std::string v = trim(t);
  if (!v.empty() && !text::to_double(v)) throw std::invalid_argument("expected a number");
}

// Each row names only the fields it sets; the others keep their defaults (GCC 12 warns of them).
Flag with_short(Flag f, const char* short_name) {
  f.short_name = short_name;
  return f;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/// A row of accelerate's own: its name is accelerate's flag and file key, its text is kept as given.
Flag acc(Setting id, const char* name, const char* group, Type type, const char* help,
         void (*check)(const S&, O&) = nullptr) {
  Flag f{.id = id, .name = name, .accelerate_key = name, .accelerate_as_is = true, .type = type, .group = group,
         .help = help, .apply = check ? check : type == Type::switch_ ? switch_value : accepted};
  f.accelerate_only = true;
  return f;
}

/// A row of accelerate's own that the workers see as `variable`, with `fallback` when it is unset.
Flag acc_var(Setting id, const char* name, const char* group, Type type, const char* variable, const char* fallback,
             const char* help = "", void (*check)(const S&, O&) = nullptr) {
  Flag f = acc(id, name, group, type, help, check);
  f.worker_variable = variable;
  f.default_shown = fallback;
  return f;
}

const std::vector<Flag> kFlags = {
    {.id = Setting::nproc_per_node, .name = "nproc_per_node", .accelerate_key = "num_processes", .default_value = "1",
     .group = kWorkers,
     .help = "workers on this node: a count, `gpu` (visible GPUs; an error if none), `cpu` (CPUs in the affinity "
             "mask), `auto` (GPUs if any, else CPUs)",
     .choices = {"gpu", "cpu", "auto"},
     .apply = [](const S& t, O& o) { o.nproc_per_node = parse_nproc(t); }, .accelerate_flag = "num_processes",
     .aliases = {"num_gpus"}},
    {.id = Setting::nnodes, .name = "nnodes", .accelerate_key = "num_machines", .default_value = "1", .group = kNodes,
     .help = "number of nodes, N or MIN:MAX (elastic)",
     .apply = [](const S& t, O& o) { std::tie(o.min_nodes, o.max_nodes) = parse_nnodes(t); },
     .accelerate_flag = "num_machines", .aliases = {"num_nodes"}},
    {.id = Setting::node_rank, .name = "node_rank", .accelerate_key = "machine_rank", .default_value = "0",
     .group = kNodes, .help = "rank of this node (static rendezvous)",
     .apply = [](const S& t, O& o) {  // its range against nnodes: check_rules
       o.node_rank = static_cast<int>(parse_int(t, 0, 1 << 20, "a node rank >= 0"));
     },
     .accelerate_flag = "machine_rank"},
    {.id = Setting::master_addr, .name = "master_addr", .accelerate_key = "main_process_ip",
     .default_value = "127.0.0.1", .group = kNodes, .help = "address of the workers' c10d store (served by dtlaunch; by rank 0 with `--agent_store=false`)",
     .apply = [](const S& t, O& o) { o.master_addr = word(t, "a host name or address"); },
     .accelerate_flag = "main_process_ip"},
    {.id = Setting::master_port, .name = "master_port", .accelerate_key = "main_process_port",
     .default_value = "29500", .group = kNodes,
     .help = "port of the workers' c10d store (several nodes: also the static rendezvous's); `0` picks a free "
             "port, and so does one static node given no port (torchrun 2.x). A port given and in use is an error "
             "before anything starts",
     .apply = [](const S& t, O& o) { o.master_port = static_cast<int>(parse_int(t, 0, 65535, "a port in 0..65535")); },
     .accelerate_flag = "main_process_port"},
    {.id = Setting::agent_store, .name = "agent_store", .default_value = "true", .group = kNodes,
     .help = "the agent serves the workers' c10d store on `--master_port` (the rendezvous port with `c10d`) and "
             "workers get `TORCHELASTIC_USE_AGENT_STORE=True`, as torchrun 2.x; `false`: worker rank 0 hosts it",
     .choices = {"true", "false"}, .apply = [](const S& t, O& o) { o.agent_store = parse_bool(t); }},
    {.id = Setting::standalone, .name = "standalone", .type = Type::switch_, .group = kNodes,
     .help = "single node: a free port for rank 0 and a random run id",
     .apply = [](const S& t, O& o) { o.standalone = parse_bool(t); }},
    {.id = Setting::rdzv_backend, .name = "rdzv_backend", .accelerate_key = "rdzv_backend", .accelerate_as_is = true,
     .default_value = "static", .group = kNodes, .help = "rendezvous backend: `static` or `c10d`",
     .choices = {"static", "c10d"},
     .apply = [](const S& t, O& o) { o.rdzv_backend = one_of(t, choices(Setting::rdzv_backend)); }},
    {.id = Setting::rdzv_endpoint, .name = "rdzv_endpoint", .group = kNodes, .help = "rendezvous endpoint `host[:port]`",
     .apply = [](const S& t, O& o) { o.rdzv_endpoint = trim(t); }},
    {.id = Setting::rdzv_id, .name = "rdzv_id", .group = kNodes, .help = "job id, an alias of `--run_id`",
     .apply = [](const S& t, O& o) {  // before run_id, which wins
       if (!t.empty()) o.run_id = run_id(t);
     }},
    {.id = Setting::rdzv_conf, .name = "rdzv_conf", .group = kNodes,
     .help = "rendezvous settings `k=v,k=v`, as torch reads them: `timeout` (static), `join_timeout`, `last_call_timeout`, "
             "`close_timeout`, `keep_alive_interval`, `keep_alive_max_attempt`, `is_host` (c10d); other keys are ignored, with a warning",
     .apply = [](const S& t, O&) { parse_rdzv_items(t); }},  // read with the backend: command_line.cc
    {.id = Setting::local_addr, .name = "local_addr", .group = kNodes,
     .help = "this node's address, as its workers are reached", .apply = [](const S& t, O& o) { o.local_addr = trim(t); }},
    {.id = Setting::rdzv_token, .name = "rdzv_token", .variables = {"DTLAUNCH_RDZV_TOKEN"}, .group = kNodes,
     .help = "shared secret that nodes prove with HMAC-SHA256 (never sent, never in the workers' environment); "
             "`ps` shows a flag, the variable it does not",
     .apply = [](const S& t, O& o) { o.rdzv_token = t; }, .secret = true},
    {.id = Setting::rdzv_token_file, .name = "rdzv_token_file", .group = kNodes, .help = "file holding the shared secret",
     .names_path = true,
     .apply = [](const S& t, O& o) { o.rdzv_token_file = t; }},
    {.id = Setting::run_id, .name = "run_id", .default_shown = "`none`", .group = kNodes,
     .help = "job id, exported as `TORCHELASTIC_RUN_ID`", .apply = [](const S& t, O& o) {
       if (!t.empty()) o.run_id = run_id(t);
     }},
    {.id = Setting::max_restarts, .name = "max_restarts", .default_value = "0", .group = kWorkers,
     .help = "restarts of the whole worker group after a failure",
     .apply = [](const S& t, O& o) { o.max_restarts = static_cast<int>(parse_int(t, 0, 1000000, "an integer >= 0")); }},
    {.id = Setting::monitor_interval, .name = "monitor_interval", .group = kWorkers,
     .help = "accepted for torchrun's command lines; dtlaunch is event-driven", .apply = accepted},
    {.id = Setting::start_method, .name = "start_method", .group = kWorkers,
     .help = "accepted for torchrun's command lines (Python-only)", .apply = accepted},
    {.id = Setting::role, .name = "role", .default_value = "default", .group = kWorkers,
     .help = "`ROLE_NAME`, and the log prefix `[<role><local_rank>]:`",
     .apply = [](const S& t, O& o) { o.role = word(t, "a non-empty role name"); }},
    {.id = Setting::no_python, .name = "no_python", .type = Type::switch_, .group = kWorkers,
     .help = "exec the program directly; otherwise `python3 -u program args` (interpreter from `PYTHON_EXEC`, else "
             "`python3` on `PATH`)",
     .apply = [](const S& t, O& o) { o.no_python = parse_bool(t); }},
    {.id = Setting::module, .name = "module", .short_name = "-m", .type = Type::switch_, .group = kWorkers,
     .help = "`python3 -u -m module args`; an error with `--no_python`", .apply = [](const S& t, O& o) {
       o.module = parse_bool(t);  // with --no_python: check_rules
     }},
    {.id = Setting::run_path, .name = "run_path", .type = Type::switch_, .group = kWorkers,
     .help = "run the script as torchrun does: `runpy.run_path` inside a small Python main, under torch's `record` "
             "when torch imports (its error file for an uncaught exception); over `--no_python` and `--module`",
     .apply = [](const S& t, O& o) { o.run_path = parse_bool(t); }},
    {.id = Setting::log_dir, .name = "log_dir", .default_shown = "temporary", .group = kOutput,
     .help = "base of the per-rank files, in torchrun's layout", .names_path = true,
     .apply = [](const S& t, O& o) { o.log_dir = t; }},
    {.id = Setting::redirects, .name = "redirects", .short_name = "-r", .default_value = "0", .group = kOutput,
     .help = "worker streams to files instead of the console: 0 none, 1 stdout, 2 stderr, 3 both; or per local "
             "rank, `0:1,1:3`",
     .apply = [](const S& t, O& o) { o.redirects = parse_streams(t); }},
    {.id = Setting::tee, .name = "tee", .short_name = "-t", .default_value = "0", .group = kOutput,
     .help = "like `--redirects`, and to the console as well", .apply = [](const S& t, O& o) { o.tee = parse_streams(t); }},
    {.id = Setting::local_ranks_filter, .name = "local_ranks_filter", .type = Type::list, .default_shown = "all",
     .group = kOutput,
     .help = "the console shows only these local ranks (`0,1`); the others' output goes to their files, never dropped",
     .apply = [](const S& t, O& o) {
       if (!t.empty()) o.local_ranks_filter = parse_rank_list(t);
     }},
    {.id = Setting::log_line_prefix_template, .name = "log_line_prefix_template",
     .variables = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"}, .default_value = "[${role_name}${local_rank}]:",
     .group = kOutput,
     .help = "prefix of each console line, with `${role_name}`, `${local_rank}`, `${rank}` and `${hostname}`",
     .apply = [](const S& t, O& o) { o.log_line_prefix_template = t; }},
    {.id = Setting::duplicate_stdout_filters, .name = "duplicate_stdout_filters", .type = Type::list, .group = kOutput,
     .help = "tee'd stdout lines holding any of these words (`,,` is a comma) also go to "
             "`attempt_N/filtered_stdout.log`, prefixed",
     .apply = [](const S& t, O& o) { o.duplicate_stdout_filters = filter_list(t); }},
    {.id = Setting::duplicate_stderr_filters, .name = "duplicate_stderr_filters", .type = Type::list, .group = kOutput,
     .help = "the same for stderr, into `attempt_N/filtered_stderr.log`",
     .apply = [](const S& t, O& o) { o.duplicate_stderr_filters = filter_list(t); }},
    {.id = Setting::dedup_lines, .name = "dedup_lines", .type = Type::switch_, .group = kOutput,
     .help = "the same line from several ranks within half a second is printed once, led by their ranks "
             "(`[ranks 0-7]:`); a line of one rank is led by `[rank N]:`. Per-rank files keep every line",
     .apply = [](const S& t, O& o) { o.dedup_lines = parse_bool(t); }},
    {.id = Setting::logs_specs, .name = "logs_specs", .group = kOutput,
     .help = "torchrun's `torchrun.logs_specs` entry point: only `default`, its built-in, which dtlaunch's logs follow "
             "(another is a Python class)",
     .apply = [](const S& t, O&) {
       const std::string name = trim(t);
       if (!name.empty() && name != "default") {
         throw std::invalid_argument("expected default, torchrun's built-in (another torchrun.logs_specs entry point is "
                                     "a Python class, which dtlaunch cannot load)");
       }
     }},
    {.id = Setting::event_log_handler, .name = "event_log_handler", .default_value = "null", .group = kOutput,
     .help = "torchrun's event handler: only `null` (a handler is a Python registry entry)",
     .apply = [](const S& t, O&) {
       if (trim(t) != "null") throw std::invalid_argument("expected null: torch's event handlers live in a Python registry, which dtlaunch cannot load");
     }},
    {.id = Setting::metrics_port, .name = "metrics_port", .group = kOutput,
     .help = "serve this node's figures (every rank's CPU, memory, state, GPU) to Prometheus on this port, at "
             "`/metrics`; `/metrics/job` has every node's (docs/monitoring.md)",
     .apply = [](const S& t, O& o) {
       if (trim(t).empty()) return o.metrics_port.reset();
       o.metrics_port = static_cast<int>(parse_int(t, 1, 65535, "a port in 1..65535"));
     }},
    {.id = Setting::metrics_addr, .name = "metrics_addr", .default_value = "127.0.0.1", .group = kOutput,
     .help = "the address `--metrics_port` listens on: loopback by default, as the figures name hosts and pids; "
             "`0.0.0.0` for every interface",
     .apply = [](const S& t, O& o) { o.metrics_addr = word(t, "an address"); }},
    {.id = Setting::shutdown_timeout, .name = "shutdown_timeout", .variables = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
     .default_value = "30", .group = kWorkers, .help = "seconds between the stop signal and SIGKILL",
     .apply = [](const S& t, O& o) { o.shutdown_timeout_s = seconds(t); }},
    {.id = Setting::hang_timeout, .name = "hang_timeout", .default_value = "600", .group = kWorkers,
     .help = "seconds in which no rank prints and some rank makes no progress before the job counts as hung: "
             "every rank's stack, a table and the suspect rank are reported (docs/hangs.md). 0: no watch",
     .apply = [](const S& t, O& o) { o.hang_timeout_s = seconds(t); }},
    {.id = Setting::on_hang, .name = "on_hang", .default_value = "report", .group = kWorkers,
     .help = "what a hang does: `report` prints the report and keeps watching; `fail` also stops the workers "
             "as a failure of the suspect rank, which --max_restarts may restart",
     .choices = {"report", "fail"},
     .apply = [](const S& t, O& o) { o.on_hang_fail = one_of(t, choices(Setting::on_hang)) == "fail"; }},
    {.id = Setting::signals_to_handle, .name = "signals_to_handle", .type = Type::list,
     .default_value = "SIGTERM,SIGINT,SIGHUP,SIGQUIT", .group = kWorkers,
     .help = "signals dtlaunch catches and forwards to the workers",
     .apply = [](const S& t, O& o) { o.signals_to_handle = parse_signal_list(t); }},
    {.id = Setting::job_cgroup, .name = "job_cgroup", .default_value = "1", .group = kWorkers,
     .help = "put the workers in a cgroup v2 of their own, killed as one (`cgroup.kill`) even when dtlaunch is "
             "SIGKILLed; where none can be made, workers' sessions are killed instead. 0: off",
     .apply = [](const S& t, O& o) { o.job_cgroup = parse_bool(t); }},
    {.id = Setting::numa_binding, .name = "numa_binding", .group = kWorkers,
     .help = "bind each worker to the CPUs near its GPU, as torchrun's: `node` (its GPU's NUMA node), `socket` "
             "(that node's socket), `exclusive` (a share of the node's cores for each GPU on it), `core-complex` "
             "(one L3 cache's CPUs on that node)",
     .choices = {"node", "socket", "exclusive", "core-complex"},
     .apply = [](const S& t, O& o) {
       o.numa_binding = trim(t).empty() ? "" : one_of(t, choices(Setting::numa_binding));
     }},
    {.id = Setting::virtual_local_rank, .name = "virtual_local_rank", .type = Type::switch_, .group = kWorkers,
     .help = "`LOCAL_RANK=0` for every worker, which sees only its own GPU (as torchrun's)",
     .apply = [](const S& t, O& o) { o.virtual_local_rank = parse_bool(t); }},
    {.id = Setting::use_env, .name = "use_env", .type = Type::switch_, .group = kWorkers,
     .help = "after `dtlaunch torch.distributed.launch`: no `--local-rank=N` argument, the workers read `LOCAL_RANK` "
             "(dtlaunch's and torchrun's way everywhere else)",
     .apply = [](const S& t, O& o) { o.use_env = parse_bool(t); }},
    {.id = Setting::no_local_rank, .name = "no_local_rank", .type = Type::switch_, .group = kWorkers,
     .help = "after `dtlaunch deepspeed`: no `--local_rank=N` argument", .apply = [](const S& t, O& o) {
       o.no_local_rank = parse_bool(t);
     }},
    {.id = Setting::gpu_ids, .name = "gpu_ids", .accelerate_key = "gpu_ids", .type = Type::list, .default_shown = "all",
     .group = kGpus,
     .help = "use only these GPUs, as indices among the visible ones (`0,2`); after `dtlaunch launch` and in "
             "accelerate's files, accelerate's meaning: physical ids, whatever `CUDA_VISIBLE_DEVICES` says",
     .apply = [](const S& t, O& o) {
       if (!t.empty() && trim(t) != "all") o.gpu_ids = parse_gpu_ids(t);
     }},
    {.id = Setting::gpu_visibility, .name = "gpu_visibility", .default_value = "per_worker", .group = kGpus,
     .help = "`per_worker`: each worker's `CUDA_VISIBLE_DEVICES` is its own GPU; `all`: every worker sees every "
             "GPU (torchrun's behaviour)",
     .choices = {"per_worker", "all"},
     .apply = [](const S& t, O& o) {
       std::string v = trim(t);
       if (v == "per-worker") v = "per_worker";
       o.gpu_visibility = one_of(v, choices(Setting::gpu_visibility)) == "all" ? GpuVisibility::all : GpuVisibility::per_worker;
     }},
    {.id = Setting::fake_gpus, .name = "fake_gpus", .variables = {"DTLAUNCH_FAKE_GPUS"}, .group = kGpus,
     .help = "pretend to have N GPUs: the whole path runs on a machine without one", .apply = [](const S& t, O& o) {
       if (!t.empty()) o.fake_gpus = static_cast<int>(parse_int(t, 0, 1024, "a GPU count in 0..1024"));
     }},
    {.id = Setting::mixed_precision, .name = "mixed_precision", .variables = {"ACCELERATE_MIXED_PRECISION"},
     .accelerate_key = "mixed_precision", .accelerate_as_is = true, .type = Type::text_or_no, .group = kAccelerate,
     .help = "`no`, `fp16`, `bf16` or `fp8`: `ACCELERATE_MIXED_PRECISION` for the workers",
     .choices = {"no", "fp16", "bf16", "fp8"},
     .apply = [](const S& t, O& o) {
       o.mixed_precision = text::lower(trim(t));
       const auto known = choices(Setting::mixed_precision);
       if (!o.mixed_precision.empty() && std::find(known.begin(), known.end(), o.mixed_precision) == known.end()) {
         throw std::invalid_argument("expected one of " + text::join(known, ", "));
       }
     }},
    {.id = Setting::use_cpu, .name = "use_cpu", .variables = {"ACCELERATE_USE_CPU"}, .accelerate_key = "use_cpu",
     .type = Type::switch_, .group = kAccelerate,
     .help = "a CPU job: the machine's GPUs are left alone (`ACCELERATE_USE_CPU` for the workers)",
     .apply = [](const S& t, O& o) {
       o.use_cpu = parse_bool(t);  // a CPU job's gpu_ids: check_rules
     },
     .accelerate_flag = "cpu"},
    {.id = Setting::debug, .name = "debug", .variables = {"ACCELERATE_DEBUG_MODE"}, .accelerate_key = "debug",
     .accelerate_as_is = true, .type = Type::switch_, .group = kAccelerate,
     .help = "`ACCELERATE_DEBUG_MODE` for the workers: accelerate checks collective operations",
     .apply = [](const S& t, O& o) { o.debug = parse_bool(t); }},
    {.id = Setting::launcher, .name = "launcher", .group = kFanout,
     .help = "start every node's agent from this command: `slurm` runs `srun --ntasks-per-node=1` over the "
             "allocation's nodes (in an `sbatch` script or `salloc` shell); `ssh` over ssh to `--hostfile`/`--hosts` "
             "(which they imply anyway); deepspeed's `pdsh`, `openmpi`, `mvapich`, `mpich` and `impi` mean `ssh`",
     .choices = {"ssh", "slurm"},
     .apply = [](const S& t, O& o) {
       std::string v = trim(t);
       // deepspeed --launcher: its transports all start one launcher per host, as the fan-out does.
       if (v == "pdsh" || v == "openmpi" || v == "mvapich" || v == "mpich" || v == "impi") v = "ssh";
       if (!v.empty()) o.launcher = one_of(v, choices(Setting::launcher));
     }},
    {.id = Setting::hostfile, .name = "hostfile", .group = kFanout,
     .help = "start one agent per host over ssh: DeepSpeed's hostfile (`host slots=N`; a bare `host` runs "
             "`--nproc_per_node` workers); the hosts meet at the first one (its first address, as `hostname -I`)",
     .names_path = true, .apply = [](const S& t, O& o) { o.fanout.hostfile = trim(t); }},
    {.id = Setting::hosts, .name = "hosts", .group = kFanout, .help = "the hosts without a file: `h1:4,h2:4` or `h1,h2`",
     .apply = [](const S& t, O& o) { o.fanout.hosts = trim(t); }},
    {.id = Setting::include, .name = "include", .group = kFanout,
     .help = "only these hosts, or these slots of a host (DeepSpeed's `h1@h2:0,2`)",
     .apply = [](const S& t, O& o) { o.fanout.include = trim(t); }},
    {.id = Setting::exclude, .name = "exclude", .group = kFanout, .help = "all hosts and slots but these (`h1:0@h3`)",
     .apply = [](const S& t, O& o) { o.fanout.exclude = trim(t); }},
    {.id = Setting::ssh_port, .name = "ssh_port", .default_shown = "ssh's", .group = kFanout,
     .help = "the hosts' ssh port", .apply = [](const S& t, O& o) {
       if (!trim(t).empty()) o.fanout.ssh_port = static_cast<int>(parse_int(t, 1, 65535, "a port in 1..65535"));
     }},
    {.id = Setting::ssh_command, .name = "ssh_command", .default_value = "ssh", .group = kFanout,
     .help = "the ssh client and its options, split as a shell would (`ssh -F cfg -i key`); "
             "`-o BatchMode=yes` is added",
     .apply = [](const S& t, O& o) { o.fanout.ssh_command = word(t, "an ssh command"); }},
    {.id = Setting::export_, .name = "export", .type = Type::list, .group = kFanout,
     .help = "more variables for every host's agent: `NAME` (its value here) or `NAME=VALUE`; `NCCL_*`, `PYTHON*`, "
             "`CUDA_*` except `CUDA_VISIBLE_DEVICES`, `TORCH_*`, `HF_*`, `OMP_*` and `./.dtlaunch_env`'s lines always go",
     .apply = [](const S& t, O& o) {
       o.fanout.exports.clear();
       for (const auto& item : split(t, ',')) {
         if (item.empty()) continue;
         const std::string name = item.substr(0, item.find('='));
         if (!text::is_variable_name(name)) throw std::invalid_argument("expected NAME or NAME=VALUE, got " + printable(item, 80));
         o.fanout.exports.push_back(item);
       }
     }},
    {.id = Setting::remote_dtlaunch, .name = "remote_dtlaunch", .default_value = "dtlaunch", .group = kFanout,
     .help = "the hosts' dtlaunch: a name on their `PATH` or a path; it must be this version",
     .apply = [](const S& t, O& o) { o.fanout.remote_dtlaunch = word(t, "a program"); }},
    {.id = Setting::node_name, .name = "node_name", .default_shown = "host name", .group = kFanout,
     .help = "this node's name in failure reports (the fan-out passes each host's name as written)",
     .apply = [](const S& t, O& o) { o.node_name = trim(t); }},
    // accelerate launch's own settings, with accelerate's names, defaults and meaning.
    acc(Setting::same_network, "same_network", kAccLaunch, Type::switch_,
        "several machines on one network: `--main_process_ip/port` are `master_addr/port`, else the rendezvous "
        "endpoint"),
    acc(Setting::multi_gpu, "multi_gpu", kAccLaunch, Type::switch_, "accelerate's MULTI_GPU run"),
    acc(Setting::use_fsdp, "use_fsdp", kAccLaunch, Type::switch_, "accelerate's FSDP run: `ACCELERATE_USE_FSDP` and `FSDP_*`"),
    acc(Setting::use_deepspeed, "use_deepspeed", kAccLaunch, Type::switch_,
        "accelerate's DeepSpeed run: `ACCELERATE_USE_DEEPSPEED` and `ACCELERATE_DEEPSPEED_*`"),
    acc(Setting::num_cpu_threads_per_process, "num_cpu_threads_per_process", kAccLaunch, Type::text,
        "`OMP_NUM_THREADS` (default: inherited, else 1; CPU runs: physical cores / processes)", integer),
    acc(Setting::enable_cpu_affinity, "enable_cpu_affinity", kAccLaunch, Type::switch_, "`ACCELERATE_CPU_AFFINITY=1`"),
    acc(Setting::main_training_function, "main_training_function", kAccLaunch, Type::text,
        "accepted: accelerate uses it on TPUs only"),
    acc(Setting::downcast_bf16, "downcast_bf16", kAccLaunch, Type::switch_, "accepted: accelerate uses it on TPUs only"),
    with_short(acc(Setting::quiet, "quiet", kAccLaunch, Type::switch_,
                   "accepted: dtlaunch never prints a Python stack trace for a failed worker"),
               "-q"),
    acc_var(Setting::dynamo_backend, "dynamo_backend", kAccDynamo, Type::text_or_no, "ACCELERATE_DYNAMO_BACKEND", "no",
            "", [](const S& t, O&) {
              if (!trim(t).empty()) one_of(text::upper(t), kDynamoBackends);
            }),
    acc_var(Setting::dynamo_mode, "dynamo_mode", kAccDynamo, Type::text, "ACCELERATE_DYNAMO_MODE", "default"),
    acc_var(Setting::dynamo_use_fullgraph, "dynamo_use_fullgraph", kAccDynamo, Type::switch_,
            "ACCELERATE_DYNAMO_USE_FULLGRAPH", ""),
    acc_var(Setting::dynamo_use_dynamic, "dynamo_use_dynamic", kAccDynamo, Type::switch_,
            "ACCELERATE_DYNAMO_USE_DYNAMIC", ""),
    acc_var(Setting::dynamo_use_regional_compilation, "dynamo_use_regional_compilation", kAccDynamo, Type::switch_,
            "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", ""),
    acc_var(Setting::fsdp_version, "fsdp_version", kAccFsdp, Type::text, "FSDP_VERSION", "1"),
    acc_var(Setting::fsdp_offload_params, "fsdp_offload_params", kAccFsdp, Type::text, "FSDP_OFFLOAD_PARAMS", "false"),
    acc_var(Setting::fsdp_min_num_params, "fsdp_min_num_params", kAccFsdp, Type::text, "FSDP_MIN_NUM_PARAMS",
            "100000000", "", integer),
    acc_var(Setting::fsdp_sharding_strategy, "fsdp_sharding_strategy", kAccFsdp, Type::text, "FSDP_SHARDING_STRATEGY",
            "FULL_SHARD"),
    acc_var(Setting::fsdp_reshard_after_forward, "fsdp_reshard_after_forward", kAccFsdp, Type::text,
            "FSDP_RESHARD_AFTER_FORWARD", "true"),
    acc_var(Setting::fsdp_auto_wrap_policy, "fsdp_auto_wrap_policy", kAccFsdp, Type::text, "FSDP_AUTO_WRAP_POLICY", ""),
    acc_var(Setting::fsdp_transformer_layer_cls_to_wrap, "fsdp_transformer_layer_cls_to_wrap", kAccFsdp, Type::text,
            "FSDP_TRANSFORMER_CLS_TO_WRAP", ""),
    acc_var(Setting::fsdp_backward_prefetch, "fsdp_backward_prefetch", kAccFsdp, Type::text, "FSDP_BACKWARD_PREFETCH",
            ""),
    acc_var(Setting::fsdp_state_dict_type, "fsdp_state_dict_type", kAccFsdp, Type::text, "FSDP_STATE_DICT_TYPE", ""),
    acc_var(Setting::fsdp_forward_prefetch, "fsdp_forward_prefetch", kAccFsdp, Type::text, "FSDP_FORWARD_PREFETCH",
            "false"),
    acc_var(Setting::fsdp_use_orig_params, "fsdp_use_orig_params", kAccFsdp, Type::text, "FSDP_USE_ORIG_PARAMS", "true"),
    acc_var(Setting::fsdp_cpu_ram_efficient_loading, "fsdp_cpu_ram_efficient_loading", kAccFsdp, Type::text,
            "FSDP_CPU_RAM_EFFICIENT_LOADING", "true", "needs `fsdp_sync_module_states`"),
    acc_var(Setting::fsdp_sync_module_states, "fsdp_sync_module_states", kAccFsdp, Type::text,
            "FSDP_SYNC_MODULE_STATES", "true"),
    acc_var(Setting::fsdp_activation_checkpointing, "fsdp_activation_checkpointing", kAccFsdp, Type::text,
            "FSDP_ACTIVATION_CHECKPOINTING", "false"),
    acc_var(Setting::fsdp_activation_checkpointing_offload, "fsdp_activation_checkpointing_offload", kAccFsdp,
            Type::text, "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "false"),
    acc_var(Setting::fsdp_ignored_modules, "fsdp_ignored_modules", kAccFsdp, Type::text, "FSDP_IGNORED_MODULES", ""),
    acc_var(Setting::zero_stage, "zero_stage", kAccDeepspeed, Type::text, "ACCELERATE_DEEPSPEED_ZERO_STAGE", "", "",
            integer),
    acc_var(Setting::offload_optimizer_device, "offload_optimizer_device", kAccDeepspeed, Type::text,
            "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", ""),
    acc_var(Setting::offload_param_device, "offload_param_device", kAccDeepspeed, Type::text,
            "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", ""),
    acc(Setting::offload_optimizer_nvme_path, "offload_optimizer_nvme_path", kAccDeepspeed, Type::text,
        "accepted: accelerate launch passes it to no worker either"),
    acc(Setting::offload_param_nvme_path, "offload_param_nvme_path", kAccDeepspeed, Type::text,
        "accepted: accelerate launch passes it to no worker either"),
    acc_var(Setting::gradient_accumulation_steps, "gradient_accumulation_steps", kAccDeepspeed, Type::text,
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "", "", integer),
    acc_var(Setting::gradient_clipping, "gradient_clipping", kAccDeepspeed, Type::text, "ACCELERATE_GRADIENT_CLIPPING",
            "", "", [](const S& t, O&) { number(t); }),
    acc_var(Setting::zero3_init_flag, "zero3_init_flag", kAccDeepspeed, Type::text, "ACCELERATE_DEEPSPEED_ZERO3_INIT",
            ""),
    acc_var(Setting::zero3_save_16bit_model, "zero3_save_16bit_model", kAccDeepspeed, Type::text,
            "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", ""),
    acc_var(Setting::deepspeed_config_file, "deepspeed_config_file", kAccDeepspeed, Type::text,
            "ACCELERATE_DEEPSPEED_CONFIG_FILE", ""),
    acc(Setting::deepspeed_multinode_launcher, "deepspeed_multinode_launcher", kAccDeepspeed, Type::text,
        "several machines: `standard` and `nossh` start one dtlaunch per machine (torchrun's way); `pdsh` (the "
        "default), `openmpi`, `mvapich`, `mpich`: dtlaunch's ssh fan-out over `deepspeed_hostfile`; all but "
        "`standard` give deepspeed's `CROSS_RANK`, `CROSS_SIZE`, `LOCAL_SIZE` (and `nossh` `--local_rank=N`)"),
    acc(Setting::deepspeed_hostfile, "deepspeed_hostfile", kAccDeepspeed, Type::text,
        "the hosts of a multi-machine DeepSpeed run (`--hostfile`; default `/job/hostfile`, as deepspeed's)"),
    acc(Setting::deepspeed_exclusion_filter, "deepspeed_exclusion_filter", kAccDeepspeed, Type::text,
        "with `deepspeed_hostfile`: `--exclude`"),
    acc(Setting::deepspeed_inclusion_filter, "deepspeed_inclusion_filter", kAccDeepspeed, Type::text,
        "with `deepspeed_hostfile`: `--include`"),
    acc_var(Setting::deepspeed_moe_layer_cls_names, "deepspeed_moe_layer_cls_names", kAccDeepspeed, Type::text,
            "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", ""),
    acc_var(Setting::fp8_backend, "fp8_backend", kAccFp8, Type::text, "ACCELERATE_FP8_BACKEND", "",
            "with `mixed_precision` fp8"),
    acc_var(Setting::fp8_use_autocast_during_eval, "fp8_use_autocast_during_eval", kAccFp8, Type::switch_,
            "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", "False"),
    acc_var(Setting::fp8_margin, "fp8_margin", kAccFp8, Type::text, "ACCELERATE_FP8_MARGIN", "0", "", integer),
    acc_var(Setting::fp8_interval, "fp8_interval", kAccFp8, Type::text, "ACCELERATE_FP8_INTERVAL", "1", "", integer),
    acc_var(Setting::fp8_format, "fp8_format", kAccFp8, Type::text, "ACCELERATE_FP8_FORMAT", "HYBRID"),
    acc_var(Setting::fp8_amax_history_len, "fp8_amax_history_len", kAccFp8, Type::text,
            "ACCELERATE_FP8_AMAX_HISTORY_LEN", "1024", "", integer),
    acc_var(Setting::fp8_amax_compute_algo, "fp8_amax_compute_algo", kAccFp8, Type::text,
            "ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "most_recent"),
    // Three variables: FPROP, DGRAD and WGRAD, in the default's order.
    acc_var(Setting::fp8_override_linear_precision, "fp8_override_linear_precision", kAccFp8, Type::text, "",
            "False,False,False", "`ACCELERATE_FP8_OVERRIDE_FPROP`, `_DGRAD`, `_WGRAD`"),
    acc_var(Setting::fp8_opt_level, "fp8_opt_level", kAccFp8, Type::text, "ACCELERATE_FP8_OPT_LEVEL", "O2"),
    acc_var(Setting::fp8_enable_fsdp_float8_all_gather, "fp8_enable_fsdp_float8_all_gather", kAccFp8, Type::text,
            "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "1"),
    acc_var(Setting::fp8_pad_inner_dim, "fp8_pad_inner_dim", kAccFp8, Type::text, "ACCELERATE_FP8_PAD_INNER_DIM", "1"),
};
#pragma GCC diagnostic pop

std::string code(const std::string& s) { return "`" + s + "`"; }

std::vector<std::string> choices(Setting id) {
  const auto& words = kFlags.at(static_cast<size_t>(id)).choices;
  return {words.begin(), words.end()};
}

}  // namespace

const std::vector<Flag>& flags() { return kFlags; }

std::string refused_accelerate_flag(const std::string& flag) {
  static const std::pair<const char*, const char*> refused[] = {
      {"--tpu", "TPUs"},
      {"--no_tpu_cluster", "TPUs"},
      {"--vm", "TPUs"},
      {"--env", "TPUs (a TPU pod's variables)"},
      {"--use_megatron_lm", "Megatron-LM"},
      {"--megatron_lm_", "Megatron-LM"},
      {"--use_parallelism_config", "accelerate's ParallelismConfig"},
      {"--parallelism_config_", "accelerate's ParallelismConfig"},
      {"--mpirun_hostfile", "mpirun (dtlaunch starts the CPU processes itself; several machines: --nnodes)"},
      {"--aws_", "Amazon SageMaker"},
  };
  std::string name = flag.substr(0, flag.find('='));
  if (name.rfind("--", 0) == 0) name = "--" + text::replace_all(name.substr(2), "-", "_");
  for (const auto& [prefix, what] : refused) {
    const std::string p = prefix;
    const bool is_prefix = p.back() == '_';
    if (is_prefix ? name.rfind(p, 0) == 0 : (name == p || (p == "--tpu" && name.rfind("--tpu_", 0) == 0))) {
      return name + ": accelerate launch's flag for " + what + ", which dtlaunch does not start";
    }
  }
  return "";
}

const Flag& flag(Setting id) { return kFlags.at(static_cast<size_t>(id)); }

std::string setting_name(Setting s) {
  for (const auto& f : kFlags) {
    if (f.id == s) return f.name;
  }
  return "?";  // every Setting has its row (flags_test checks)
}

const Flag* find_flag(const std::string& name) {
  for (const auto& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> long_spellings(const Flag& f) {
  std::vector<std::string> out;
  std::vector<const char*> names{f.name};
  names.insert(names.end(), f.aliases.begin(), f.aliases.end());
  for (const char* name : names) {
    std::string dashed = text::replace_all(name, "_", "-");
    out.push_back(std::string("--") + name);
    if (dashed != name) out.push_back("--" + dashed);
  }
  return out;
}

std::vector<std::string> variable_names(const Flag& f) {
  std::vector<std::string> names{"PET_" + text::upper(f.name)};
  names.insert(names.end(), f.variables.begin(), f.variables.end());
  return names;
}

std::vector<std::string> secret_variables() {
  std::vector<std::string> names;
  for (const auto& f : kFlags) {
    if (!f.secret) continue;
    auto v = variable_names(f);
    names.insert(names.end(), v.begin(), v.end());
  }
  return names;
}

std::vector<std::string> help_groups() {
  std::vector<std::string> groups;
  for (const auto& f : kFlags) {
    if (std::find(groups.begin(), groups.end(), f.group) == groups.end()) groups.push_back(f.group);
  }
  return groups;
}

std::string help_text(const Flag& f) {
  if (!*f.worker_variable) return f.help;
  return code(f.worker_variable) + (*f.help ? std::string("; ") + f.help : "");
}

std::string flags_markdown() {
  std::string out;
  for (const auto& group : help_groups()) {
    out += (out.empty() ? "" : "\n") + std::string("**") + group + "**\n\n| flag | default | meaning |\n|---|---|---|\n";
    for (const auto& f : kFlags) {
      if (f.group != group) continue;
      std::string spelled = *f.short_name ? code(f.short_name) + ", " : "";
      spelled += code(std::string("--") + f.name);
      for (const char* v : f.variables) spelled += " (" + code(v) + ")";
      std::string def = f.type == Type::switch_ ? "off"
                        : *f.default_shown      ? f.default_shown
                        : *f.default_value      ? code(f.default_value)
                                                : "—";
      out += "| " + spelled + " | " + def + " | " + help_text(f) + " |\n";
    }
  }
  return out;
}

NprocSpec parse_nproc(const std::string& text) {
  std::string t = trim(text);
  if (t == "gpu") return {NprocSpec::Kind::gpu, 0};
  if (t == "cpu") return {NprocSpec::Kind::cpu, 0};
  if (t == "auto") return {NprocSpec::Kind::auto_, 0};
  return {NprocSpec::Kind::count,
          static_cast<int>(parse_int(t, 1, 4096, "a positive integer or one of gpu, cpu, auto"))};
}

StreamsSpec parse_streams(const std::string& text) {
  const std::string what = "0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs like 0:1,1:3";
  StreamsSpec spec;
  std::string t = trim(text);
  if (t.find(':') == std::string::npos) {
    spec.all = static_cast<Streams>(parse_int(t, 0, 3, what));
    return spec;
  }
  for (const auto& item : split(t, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("expected " + what);
    int rank = static_cast<int>(parse_int(item.substr(0, colon), 0, 1 << 20, what));
    spec.per_rank[rank] = static_cast<Streams>(parse_int(item.substr(colon + 1), 0, 3, what));
  }
  return spec;
}

std::set<int> parse_rank_list(const std::string& text) {
  std::set<int> ranks;
  for (const auto& item : split(text, ',')) {
    ranks.insert(static_cast<int>(parse_int(item, 0, 1 << 20, "comma-separated local ranks like 0,1")));
  }
  return ranks;
}

std::vector<int> parse_gpu_ids(const std::string& text) {
  std::vector<int> ids;
  std::set<int> seen;
  for (const auto& item : split(text, ',')) {
    int id = static_cast<int>(parse_int(item, 0, 1023, "comma-separated GPU indices like 0,2"));
    if (!seen.insert(id).second) throw std::invalid_argument("GPU " + item + " is listed twice");
    ids.push_back(id);
  }
  return ids;
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  const std::string what = "N or MIN:MAX with 0 < MIN <= MAX";
  auto colon = text.find(':');
  int min = static_cast<int>(parse_int(text.substr(0, colon), 1, 1 << 20, what));
  int max = colon == std::string::npos ? min : static_cast<int>(parse_int(text.substr(colon + 1), 1, 1 << 20, what));
  if (max < min) throw std::invalid_argument("expected " + what);
  return {min, max};
}

bool parse_bool(const std::string& text) {
  std::string t = trim(text);
  if (t == "1" || t == "true" || t == "True" || t == "yes") return true;
  if (t == "0" || t == "false" || t == "False" || t == "no" || t.empty()) return false;
  throw std::invalid_argument("expected 1 or 0");
}

std::vector<std::pair<std::string, std::string>> parse_rdzv_items(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> items;
  if (trim(text).empty()) return items;
  for (const auto& item : split(text, ',')) {
    auto eq = item.find('=');
    std::string key = trim(item.substr(0, eq));
    if (eq == std::string::npos || key.empty()) throw std::invalid_argument("'" + printable(item) + "' is not key=value");
    std::string v = trim(item.substr(eq + 1));
    if (v.empty()) throw std::invalid_argument(printable(key) + " has no value");
    items.emplace_back(key, v);
  }
  return items;
}

RdzvConf parse_rdzv_conf(const std::string& text, bool static_backend, std::vector<std::string>* ignored) {
  RdzvConf conf;
  auto seconds = [](const std::string& key, const std::string& v) {
    double s = text::to_double(v).value_or(-1);
    // the timers count milliseconds: less than one would be a zero interval or timeout
    if (!(s >= 0.001) || s > 1e7) {
      throw std::invalid_argument(key + " expects seconds >= 0.001 (got '" + printable(v) + "')");
    }
    return s;
  };
  auto ignore = [&](const std::string& key, const std::string& why) {
    if (ignored) ignored->push_back("'" + printable(key) + "' " + why);
  };
  // torch 2.x's readers: the static handler reads `timeout` (and the node's rank, which torchrun
  // sets from --node_rank); the c10d handler and backend read the rest. Each ignores what it does
  // not read, and so does dtlaunch, saying so.
  for (const auto& [key, v] : parse_rdzv_items(text)) {
    if (key == "timeout") {
      if (static_backend) {
        conf.static_timeout_s = seconds(key, v);
      } else {
        ignore(key, "(the c10d backend waits join_timeout; torch's reads no timeout either)");
      }
    } else if (key == "join_timeout") {
      if (static_backend) {
        ignore(key, "(the static backend waits `timeout` seconds, as torch's: join_timeout is c10d's)");
      } else {
        conf.join_timeout_s = seconds(key, v);
      }
    } else if (key == "last_call_timeout") {
      conf.last_call_timeout_s = seconds(key, v);
    } else if (key == "close_timeout") {
      conf.close_timeout_s = seconds(key, v);
    } else if (key == "keep_alive_interval") {
      conf.keep_alive_interval_s = seconds(key, v);
    } else if (key == "keep_alive_max_attempt") {
      conf.keep_alive_max_attempt = static_cast<int>(parse_int(v, 1, 1000, "keep_alive_max_attempt: an integer >= 1"));
    } else if (key == "is_host") {
      conf.is_host = parse_bool(v);
    } else if (key == "heartbeat_timeout" || key == "read_timeout") {
      // torch's deadlines for one store operation (a heartbeat's write, any read): dtlaunch's
      // rendezvous is messages over one connection, whose silence keep_alive_* bound
      seconds(key, v);
    } else if (key == "cas_backoff_max_seconds") {
      double s = text::to_double(v).value_or(-1);
      if (!(s >= 0) || s > 1e7) throw std::invalid_argument(key + " expects seconds >= 0 (got '" + printable(v) + "')");
    } else if (key == "store_type") {
      if (text::lower(v) != "tcp") {
        throw std::invalid_argument("store_type=" + printable(v) + ": dtlaunch's rendezvous is served over TCP only");
      }
    } else if (key == "rank") {
      ignore(key, "(torchrun sets the static backend's rank from --node_rank)");
    } else {
      ignore(key, "(torch's rendezvous reads no such key)");
    }
  }
  return conf;
}

std::vector<int> parse_signal_list(const std::string& text) {
  static const std::pair<const char*, int> known[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
      {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGALRM", SIGALRM}, {"SIGXCPU", SIGXCPU}};
  std::vector<int> sigs;
  for (const auto& item : split(text, ',')) {
    std::string name = text::upper(item);
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    int found = 0;
    for (const auto& [n, s] : known) {
      if (name == n) found = s;
    }
    if (!found) {
      throw std::invalid_argument("unknown signal '" + printable(item) +
                                  "' (use SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU)");
    }
    sigs.push_back(found);
  }
  return sigs;
}

}  // namespace dtl::config
