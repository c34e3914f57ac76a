#include "config/accelerate_line.h"

#include <algorithm>
#include <cstdlib>

#include "config/accelerate.h"
#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// The failed Result "--nproc_per_node=4 and --num_processes=6 disagree (...); give one of them".
tl::unexpected<Error> disagree(const Resolved& a, const Resolved& b, const std::string& why = "") {
  return fail(a.source.where + "=" + printable(a.text) + " and " + b.source.where + "=" + printable(b.text) + " disagree" +
              (why.empty() ? "" : " (" + why + ")") + "; give one of them");
}

}  // namespace

/// accelerate launch's spellings of shared settings, with accelerate's meaning: --num_processes is the
/// total over --num_machines, and machines not on one network (no --same_network) meet at
/// --main_process_ip:--main_process_port. Both spellings of one setting on the command line must agree.
Status accelerate_spellings(const TypedValues& cl, std::vector<Resolved>& settings) {
  for (size_t i = 0; i < settings.size(); ++i) {
    auto acc = cl.accelerate_spelling(i);
    if (!acc || static_cast<Setting>(i) == Setting::nproc_per_node) continue;
    if (auto typed = cl.own_spelling(i)) {
      if (typed->text != acc->text) return disagree(*typed, *acc);
      continue;
    }
    settings[i] = *acc;
  }
  const Resolved& nnodes = row(settings, Setting::nnodes);
  long machines = std::strtol(nnodes.text.substr(nnodes.text.rfind(':') + 1).c_str(), nullptr, 10);
  if (machines < 1) return {};  // the nnodes row reports it
  const std::string machines_where = nnodes.source.kind == Source::Kind::default_ ? "--num_machines" : nnodes.source.where;
  if (auto total = cl.accelerate_spelling(static_cast<size_t>(Setting::nproc_per_node))) {
    const long n = text::to_long(total->text).value_or(0);
    if (n < 1) return value_error(*total, "expected an integer >= 1");
    const std::string over = machines_where + "=" + std::to_string(machines);
    if (n % machines != 0) {
      return fail(total->source.where + ": expected a total divisible by " + over +
                  " (num_processes counts the processes of all machines) (got '" + printable(total->text) + "')");
    }
    const std::string per_node = std::to_string(n / machines);
    const std::string why = total->source.where + " is the total over " + over + ": " + per_node + " per machine";
    if (auto typed = cl.own_spelling(static_cast<size_t>(Setting::nproc_per_node))) {
      if (typed->text != per_node) return disagree(*typed, *total, why);
    } else {
      total->source.note = machines > 1 ? "total " + total->text + " over " + std::to_string(machines) + " machines" : "";
      total->text = per_node;
      row(settings, Setting::nproc_per_node) = *total;
    }
  }
  auto ip = cl.accelerate_spelling(static_cast<size_t>(Setting::master_addr));
  if (machines > 1 && ip && row(settings, Setting::same_network).text != "1") {
    auto port = cl.accelerate_spelling(static_cast<size_t>(Setting::master_port));
    Resolved endpoint = *ip;
    endpoint.flag = &flag(Setting::rdzv_endpoint);
    endpoint.text = ip->text + ":" + (port ? port->text : "29500");
    endpoint.source.note = "main_process_ip:main_process_port, no --same_network";
    row(settings, Setting::rdzv_endpoint) = endpoint;
  }
  return {};
}

/// Whether a setting counts as one of accelerate launch's flags: given as a flag, a PET_* variable or
/// in dtlaunch's own file. accelerate reads its file after its flags, and never ACCELERATE_USE_CPU.
bool as_flag(const Resolved& s, const LaunchOptions& o) {
  switch (s.source.kind) {
    case Source::Kind::flag: return true;
    case Source::Kind::env: return s.source.where.rfind("PET_", 0) == 0;
    case Source::Kind::file: return !o.accelerate.file;
    default: return false;
  }
}

/// accelerate's rules between its own settings.
Status check_accelerate_rules(const std::vector<Resolved>& settings, LaunchOptions& o) {
  const Resolved* kind = nullptr;
  const auto from_file = [&](const Resolved& s) { return s.source.kind == Source::Kind::file && o.accelerate.file; };
  for (Setting id : {Setting::use_cpu, Setting::multi_gpu, Setting::use_fsdp, Setting::use_deepspeed}) {
    const Resolved& s = settings[static_cast<size_t>(id)];
    if (s.text != "1") continue;
    // ACCELERATE_USE_CPU and a file's use_cpu choose no kind of run: accelerate launch goes by --cpu and distributed_type
    const bool cpu = id == Setting::use_cpu;
    if (cpu && !as_flag(s, o)) continue;
    // --cpu over a file's distributed_type is a CPU run, as accelerate runs it (`use_deepspeed and not cpu`)
    if (kind && kind->flag->id == Setting::use_cpu && from_file(s)) continue;
    if (kind) {
      return fail(kind->source.where + " and " + s.source.where + " choose two kinds of run; accelerate takes one of "
                  "--cpu, --multi_gpu, --use_deepspeed, --use_fsdp at a time");
    }
    kind = &s;
  }
  // accelerate's --fp8_override_linear_precision: comma-separated str_to_bool words
  if (const Resolved& p = row(settings, Setting::fp8_override_linear_precision);
      p.source.kind != Source::Kind::file && !p.text.empty()) {
    for (const auto& item : text::split(p.text, ',')) {
      if (python_bool_word(item).empty()) return value_error(p, "expected comma-separated booleans like False,False,True");
    }
  }
  const auto& v = o.accelerate.values;
  auto value = [&](const char* name, const char* fallback) {
    auto it = v.find(name);
    return text::lower(it == v.end() ? fallback : it->second);
  };
  if (o.accelerate.values.count("use_fsdp") && value("use_fsdp", "0") == "1" &&
      value("fsdp_cpu_ram_efficient_loading", "true") == "true" && value("fsdp_sync_module_states", "true") != "true") {
    return fail(o.source(Setting::fsdp_cpu_ram_efficient_loading).where + ": fsdp_cpu_ram_efficient_loading needs "
                "fsdp_sync_module_states (" + o.source(Setting::fsdp_sync_module_states).where + ") to be true, as accelerate says");
  }
  // DeepSpeed on several machines through deepspeed's runner (any launcher but `standard`, which is
  // torchrun): its launch.py starts the workers on every machine, with CROSS_RANK, CROSS_SIZE,
  // LOCAL_SIZE and CUDA_VISIBLE_DEVICES narrowed to the machine's slots. accelerate passes
  // --no_local_rank to all but `nossh`, where launch.py adds --local_rank=N to the script's arguments.
  const std::string launcher = value("deepspeed_multinode_launcher", "pdsh");
  if (value("use_deepspeed", "0") != "1" || o.max_nodes <= 1 || launcher == "standard") return {};
  o.deepspeed_variables = true;
  if (launcher == "nossh") {  // `deepspeed --no_ssh --node_rank R` on each machine: one dtlaunch per machine
    o.local_rank_arg = LaunchOptions::LocalRankArg::underscore;
    return {};
  }
  // pdsh, openmpi, ...: `deepspeed --hostfile` on this machine starts every host: dtlaunch's ssh fan-out.
  if (o.fanout.hostfile.empty() && o.fanout.hosts.empty()) {
    const auto take = [&](Setting from, Setting to, std::string& field, const char* fallback) {
      auto it = v.find(setting_name(from));
      field = it == v.end() ? fallback : it->second;
      if (it != v.end()) o.sources[to] = o.source(from);
    };
    take(Setting::deepspeed_hostfile, Setting::hostfile, o.fanout.hostfile, "/job/hostfile");  // deepspeed's default
    if (!v.count("deepspeed_hostfile")) o.sources[Setting::hostfile] = {Source::Kind::default_, "deepspeed's default hostfile", ""};
    take(Setting::deepspeed_inclusion_filter, Setting::include, o.fanout.include, "");
    take(Setting::deepspeed_exclusion_filter, Setting::exclude, o.fanout.exclude, "");
    o.fanout.deepspeed_runner = true;
  }
  return {};
}

/// accelerate launch's defaults where torchrun's differ: after `launch`, one worker per GPU when no
/// num_processes is given (take_accelerate_facts sets it); and every worker sees every GPU.
void accelerate_defaults(bool launch, bool accelerate_file, std::vector<Resolved>& settings) {
  Resolved& nproc = row(settings, Setting::nproc_per_node);
  if (launch && nproc.source.kind == Source::Kind::default_) {
    nproc.source.note = "accelerate launch: one per GPU when the machine has GPUs";
  }
  Resolved& visibility = row(settings, Setting::gpu_visibility);
  if ((launch || accelerate_file) && visibility.source.kind == Source::Kind::default_) {
    // accelerate's workers pick cuda:LOCAL_RANK (Accelerator does), so they must all see every GPU.
    visibility.text = "all";
    visibility.source.note = "accelerate: every worker sees every GPU";
  }
}

/// What accelerate launch would make of the run beyond the shared settings: whether its variables
/// apply (`dtlaunch launch`, or an accelerate file), which launcher a file or flag chose, accelerate's
/// own use_cpu, and the meaning of gpu_ids.
void take_accelerate_facts(bool launch, const ConfigFile* file, const std::vector<Resolved>& settings, LaunchOptions& o) {
  const bool accelerate_file = file && file->format == ConfigFile::Format::accelerate;
  // An accelerate setting given in dtlaunch's own terms is never dropped: the workers get accelerate's variables.
  const bool accelerate_setting = std::any_of(settings.begin(), settings.end(), [](const Resolved& s) {
    return s.flag->accelerate_only && s.source.kind != Source::Kind::default_;
  });
  o.accelerate.launch = launch || accelerate_file || accelerate_setting;
  if (launch && o.source(Setting::nproc_per_node).kind == Source::Kind::default_) {
    o.nproc_per_node = {NprocSpec::Kind::gpu_or_one, 1};
  }
  o.accelerate.cpu_flag = o.use_cpu && as_flag(settings[static_cast<size_t>(Setting::use_cpu)], o);
  o.accelerate.chosen = o.accelerate.cpu_flag || accelerate_file;
  for (Setting id : {Setting::multi_gpu, Setting::use_fsdp, Setting::use_deepspeed}) {
    o.accelerate.chosen |= settings[static_cast<size_t>(id)].source.kind != Source::Kind::default_;
  }
  // accelerate's --gradient_clipping is a float: str(1.0) is "1.0"; a file's value is as YAML wrote it.
  auto clipping = o.accelerate.values.find("gradient_clipping");
  if (clipping != o.accelerate.values.end() && o.source(Setting::gradient_clipping).kind != Source::Kind::file) {
    clipping->second = python_float(std::strtod(clipping->second.c_str(), nullptr));
  }
  // accelerate's args.use_cpu: the file's key, else --cpu. A MULTI_CPU file without the key keeps the
  // GPUs out of dtlaunch's plan only; an inherited ACCELERATE_USE_CPU is the workers' to read.
  o.accelerate.use_cpu = accelerate_file ? file->use_cpu : o.accelerate.cpu_flag;
  if (accelerate_file) o.accelerate.deepspeed_fields = file->deepspeed_fields;
  const bool from_file = o.source(Setting::gpu_ids).kind == Source::Kind::file;
  o.accelerate.physical_gpu_ids = o.gpu_ids && (from_file ? accelerate_file : launch);
}

/// --print_config's line above a setting that accelerate spells or means otherwise.
std::string other_name(const Flag& f, const LaunchOptions& o) {
  if (f.id == Setting::nproc_per_node) {
    std::string total = "accelerate: --num_processes / num_processes, the total over all machines";
    if (o.nproc_per_node.kind != NprocSpec::Kind::count) return total;
    return total + " (" + std::to_string(o.nproc_per_node.count * o.max_nodes) + " here)";
  }
  if (f.id == Setting::gpu_ids) {
    return o.accelerate.physical_gpu_ids ? "gpu_ids: physical ids, accelerate's meaning (CUDA_VISIBLE_DEVICES is not read)"
                                         : "gpu_ids: indices among the visible GPUs, dtlaunch's meaning";
  }
  if (*f.accelerate_flag) return std::string("accelerate: --") + f.accelerate_flag + " / " + f.accelerate_key;
  return "";
}

}  // namespace dtl::config
