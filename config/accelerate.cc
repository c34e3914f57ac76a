#include "config/accelerate.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>

#include "config/config_file.h"
#include "config/flags.h"
#include "base/text.h"

namespace dtl::config {
namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

/// accelerate's settings as its argparse namespace holds them after the config file is merged in.
class Settings {
 public:
  explicit Settings(const AccelerateOptions& a) : values_(a.values) {}

  std::string text(const std::string& name, const std::string& fallback = "") const {
    auto it = values_.find(name);
    return it == values_.end() || it->second.empty() ? fallback : it->second;
  }
  bool has(const std::string& name) const { return !text(name).empty(); }
  /// A store_true flag: the table holds "1"/"0", a file's boolean too.
  bool on(const std::string& name) const { return text(name) == "1" || text(name) == "True"; }
  /// str(bool), as accelerate writes a store_true flag's value.
  std::string python_bool(const std::string& name) const { return on(name) ? "True" : "False"; }
  /// The setting's text, else what its row says the workers get when it is unset.
  std::string value(Setting id) const { return text(flag(id).name, flag(id).default_shown); }

 private:
  const std::map<std::string, std::string>& values_;
};

/// get_int_from_env([name], fallback): the variable as an integer when it is one.
int int_from_env(const EnvLookup& env, const std::string& name, int fallback) {
  auto v = env(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  return *end == '\0' ? static_cast<int>(n) : fallback;
}

/// OMP_NUM_THREADS: --num_cpu_threads_per_process, else the inherited value, else 1; a CPU run with
/// nothing inherited spreads the physical cores over the node's processes (_validate_launch_command).
std::string omp_threads(const LaunchOptions& o, const Settings& s, const AccelerateHost& host) {
  if (s.has("num_cpu_threads_per_process")) return s.text("num_cpu_threads_per_process");
  int threads = int_from_env(host.env, "OMP_NUM_THREADS", 1);
  if (o.accelerate.use_cpu && int_from_env(host.env, "OMP_NUM_THREADS", 0) == 0) {
    int local = host.nproc_per_node;
    for (const char* name : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"}) {
      if (host.env(name)) {
        local = int_from_env(host.env, name, local);
        break;
      }
    }
    int spread = host.physical_cores / std::max(local, 1);
    if (spread > 1) threads = spread;
  }
  return std::to_string(threads);
}

}  // namespace

std::string python_bool_word(const std::string& word) {
  const std::string w = text::lower(text::trim(word));
  if (w == "y" || w == "yes" || w == "t" || w == "true" || w == "on" || w == "1") return "True";
  if (w == "n" || w == "no" || w == "f" || w == "false" || w == "off" || w == "0") return "False";
  return "";
}

namespace {

enum class Case { as_is, lower, upper };

/// The setting's row's worker variable with its value (text::lower/upper'ed as accelerate does);
/// nothing when the setting is unset and its row has no default.
void add(const Settings& s, Setting id, Vars& vars, Case c = Case::as_is) {
  std::string v = s.value(id);
  if (v.empty()) return;
  vars.emplace_back(flag(id).worker_variable, c == Case::lower ? text::lower(v) : c == Case::upper ? text::upper(v) : v);
}

/// FPROP, DGRAD, WGRAD: a flag's comma-separated booleans (`type=lambda x: tuple(map(str_to_bool, ...))`),
/// a file's list as PyYAML read it, or a file's string character by character (str(value[i])).
std::vector<std::string> override_precision(const LaunchOptions& o, const std::string& v) {
  const Source source = o.source(Setting::fp8_override_linear_precision);
  std::vector<std::string> parts;
  if (source.kind == Source::Kind::file && source.note == kOverrideCharacters) {
    for (size_t i = 0; i < 3 && i < v.size(); ++i) parts.emplace_back(1, v[i]);
  } else if (source.kind == Source::Kind::file) {
    parts = text::split(v, ',');
  } else {
    for (const auto& item : text::split(v, ',')) parts.push_back(python_bool_word(item));
  }
  parts.resize(3, "False");
  return parts;
}

/// setup_fp8_env: every fp8_ setting, with the parser's defaults, as ACCELERATE_FP8_*, in name order.
void add_fp8(const LaunchOptions& o, const Settings& s, Vars& vars) {
  std::map<std::string, std::pair<const char*, std::string>> fp8;  // name: variable, value
  for (const Flag& f : flags()) {
    if (!*f.worker_variable || std::string(f.name).rfind("fp8_", 0) != 0) continue;
    std::string v = s.value(f.id);
    if (s.has(f.name) && f.id == Setting::fp8_use_autocast_during_eval) {
      v = s.python_bool(f.name);
    } else if (s.has(f.name) &&
               (f.id == Setting::fp8_enable_fsdp_float8_all_gather || f.id == Setting::fp8_pad_inner_dim)) {
      v = python_bool_word(v) == "True" ? "1" : "0";
    }
    if (!v.empty()) fp8[f.name] = {f.worker_variable, v};
  }
  for (const auto& [name, var_value] : fp8) vars.emplace_back(var_value.first, var_value.second);
  const Setting override_id = Setting::fp8_override_linear_precision;
  const std::vector<std::string> override = s.has(flag(override_id).name)
                                                ? override_precision(o, s.text(flag(override_id).name))
                                                : text::split(flag(override_id).default_shown, ',');
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_FPROP", override[0]);
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_DGRAD", override[1]);
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_WGRAD", override[2]);
}

void add_dynamo(const Settings& s, Vars& vars) {
  add(s, Setting::dynamo_backend, vars, Case::upper);
  add(s, Setting::dynamo_mode, vars);
  for (Setting id : {Setting::dynamo_use_fullgraph, Setting::dynamo_use_dynamic,
                     Setting::dynamo_use_regional_compilation}) {
    vars.emplace_back(flag(id).worker_variable, s.python_bool(flag(id).name));
  }
}

/// FSDP_*: most always set (with the parser's defaults), some lower-cased; a few only when given.
void add_fsdp(const Settings& s, Vars& vars) {
  vars.emplace_back("ACCELERATE_USE_FSDP", "true");
  add(s, Setting::fsdp_version, vars);
  add(s, Setting::fsdp_sharding_strategy, vars);
  add(s, Setting::fsdp_reshard_after_forward, vars, Case::lower);
  add(s, Setting::fsdp_offload_params, vars, Case::lower);
  add(s, Setting::fsdp_min_num_params, vars);
  for (Setting id : {Setting::fsdp_auto_wrap_policy, Setting::fsdp_transformer_layer_cls_to_wrap,
                     Setting::fsdp_backward_prefetch, Setting::fsdp_state_dict_type}) {
    add(s, id, vars);
  }
  for (Setting id : {Setting::fsdp_forward_prefetch, Setting::fsdp_use_orig_params,
                     Setting::fsdp_cpu_ram_efficient_loading, Setting::fsdp_sync_module_states,
                     Setting::fsdp_activation_checkpointing, Setting::fsdp_activation_checkpointing_offload}) {
    add(s, id, vars, Case::lower);
  }
  add(s, Setting::fsdp_ignored_modules, vars);
}

void add_deepspeed(const LaunchOptions& o, const Settings& s, const AccelerateHost& host, Vars& vars) {
  std::vector<std::string> path;
  if (auto inherited = host.env("PYTHONPATH")) {
    for (const auto& p : text::split(*inherited, ':')) {
      if (!p.empty()) path.push_back(p);
    }
  }
  path.push_back(host.cwd);
  vars.emplace_back("PYTHONPATH", text::join(path, ":"));
  // accelerate's DeepSpeed launcher imports deepspeed, whose __init__ does os.environ.setdefault() this.
  if (!host.env("PYTORCH_NVML_BASED_CUDA_CHECK")) vars.emplace_back("PYTORCH_NVML_BASED_CUDA_CHECK", "1");
  std::vector<std::string> fields = o.accelerate.deepspeed_fields;
  if (o.source(Setting::mixed_precision).kind == Source::Kind::file) fields.push_back("mixed_precision");
  vars.emplace_back("ACCELERATE_CONFIG_DS_FIELDS", text::lower(text::join(fields)));
  vars.emplace_back("ACCELERATE_USE_DEEPSPEED", "true");
  // Each only when given.
  add(s, Setting::zero_stage, vars);
  add(s, Setting::gradient_accumulation_steps, vars);
  for (Setting id : {Setting::gradient_clipping, Setting::offload_optimizer_device, Setting::offload_param_device,
                     Setting::zero3_init_flag, Setting::zero3_save_16bit_model}) {
    add(s, id, vars, Case::lower);
  }
  add(s, Setting::deepspeed_config_file, vars);
  add(s, Setting::deepspeed_moe_layer_cls_names, vars);
}

}  // namespace

std::string python_float(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // repr(1.0) is "1.0", and inf/nan stay words
  auto e = s.find('e');
  if (e != std::string::npos && s.size() - e == 3) s.insert(e + 2, "0");  // repr(1e-5) is "1e-05"
  return s;
}

AccelerateLauncher accelerate_launcher(const LaunchOptions& o, const AccelerateHost& host) {
  const Settings s(o.accelerate);
  if (o.accelerate.cpu_flag) return AccelerateLauncher::simple;
  if (s.on("use_deepspeed")) return AccelerateLauncher::deepspeed;
  if (s.on("use_fsdp") || s.on("multi_gpu")) return AccelerateLauncher::multi_gpu;
  // Neither a file nor a flag chose: more than one GPU and more than one process turn on multi-GPU.
  if (!o.accelerate.chosen && host.gpus > 1 && host.nproc_per_node > 1) return AccelerateLauncher::multi_gpu;
  return AccelerateLauncher::simple;
}

std::vector<std::pair<std::string, std::string>> accelerate_variables(const LaunchOptions& o,
                                                                      const AccelerateHost& host) {
  const Settings s(o.accelerate);
  const AccelerateLauncher launcher = accelerate_launcher(o, host);
  Vars vars;
  if (launcher == AccelerateLauncher::simple) {
    const bool cpu = o.accelerate.cpu_flag || o.accelerate.use_cpu;  // `str(args.cpu or args.use_cpu)`
    vars.emplace_back("ACCELERATE_USE_CPU", cpu ? "True" : "False");
    if (cpu) {
      vars.emplace_back("KMP_AFFINITY", "granularity=fine,compact,1,0");
      vars.emplace_back("KMP_BLOCKTIME", "1");
    }
  }
  if (o.debug) vars.emplace_back("ACCELERATE_DEBUG_MODE", "true");
  const std::string precision = o.mixed_precision.empty() ? "no" : o.mixed_precision;
  vars.emplace_back("ACCELERATE_MIXED_PRECISION", precision);
  if (precision == "fp8") add_fp8(o, s, vars);
  if (launcher == AccelerateLauncher::deepspeed) {
    add_deepspeed(o, s, host, vars);
  } else {
    add_dynamo(s, vars);
    if (launcher == AccelerateLauncher::multi_gpu && s.on("use_fsdp")) add_fsdp(s, vars);
    vars.emplace_back("OMP_NUM_THREADS", omp_threads(o, s, host));
  }
  if (s.on("enable_cpu_affinity")) vars.emplace_back("ACCELERATE_CPU_AFFINITY", "1");
  vars.insert(vars.end(), o.extra_env.begin(), o.extra_env.end());
  return vars;
}

}  // namespace dtl::config
