#include "config/accelerate.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <tuple>

#include "config/config_file.h"
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

/// setup_fp8_env: every fp8_ setting, with the parser's defaults, as ACCELERATE_FP8_*.
void add_fp8(const LaunchOptions& o, Vars& vars) {
  const AccelerateOptions& a = o.accelerate;
  std::map<std::string, std::string> fp8 = {
      {"fp8_use_autocast_during_eval", "False"}, {"fp8_margin", "0"}, {"fp8_interval", "1"},
      {"fp8_format", "HYBRID"}, {"fp8_amax_history_len", "1024"}, {"fp8_amax_compute_algo", "most_recent"},
      {"fp8_opt_level", "O2"}, {"fp8_enable_fsdp_float8_all_gather", "1"}, {"fp8_pad_inner_dim", "1"}};
  std::vector<std::string> override = {"False", "False", "False"};
  for (const auto& [name, v] : a.values) {
    if (name.rfind("fp8_", 0) != 0 || v.empty()) continue;
    if (name == "fp8_override_linear_precision") {
      override = override_precision(o, v);
    } else if (name == "fp8_use_autocast_during_eval") {
      fp8[name] = v == "1" || v == "True" ? "True" : "False";
    } else if (name == "fp8_enable_fsdp_float8_all_gather" || name == "fp8_pad_inner_dim") {
      const std::string b = text::lower(v);
      fp8[name] = b == "1" || b == "true" || b == "yes" || b == "y" || b == "t" || b == "on" ? "1" : "0";
    } else {
      fp8[name] = v;
    }
  }
  for (const auto& [name, v] : fp8) vars.emplace_back("ACCELERATE_" + text::upper(name), v);
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_FPROP", override[0]);
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_DGRAD", override[1]);
  vars.emplace_back("ACCELERATE_FP8_OVERRIDE_WGRAD", override[2]);
}

void add_dynamo(const Settings& s, Vars& vars) {
  vars.emplace_back("ACCELERATE_DYNAMO_BACKEND", text::upper(s.text("dynamo_backend", "no")));
  vars.emplace_back("ACCELERATE_DYNAMO_MODE", s.text("dynamo_mode", "default"));
  vars.emplace_back("ACCELERATE_DYNAMO_USE_FULLGRAPH", s.python_bool("dynamo_use_fullgraph"));
  vars.emplace_back("ACCELERATE_DYNAMO_USE_DYNAMIC", s.python_bool("dynamo_use_dynamic"));
  vars.emplace_back("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", s.python_bool("dynamo_use_regional_compilation"));
}

/// FSDP_*: most always set (with the parser's defaults), lower-cased; a few only when given.
void add_fsdp(const Settings& s, Vars& vars) {
  vars.emplace_back("ACCELERATE_USE_FSDP", "true");
  vars.emplace_back("FSDP_VERSION", s.text("fsdp_version", "1"));
  vars.emplace_back("FSDP_SHARDING_STRATEGY", s.text("fsdp_sharding_strategy", "FULL_SHARD"));
  vars.emplace_back("FSDP_RESHARD_AFTER_FORWARD", text::lower(s.text("fsdp_reshard_after_forward", "true")));
  vars.emplace_back("FSDP_OFFLOAD_PARAMS", text::lower(s.text("fsdp_offload_params", "false")));
  vars.emplace_back("FSDP_MIN_NUM_PARAMS", s.text("fsdp_min_num_params", "100000000"));
  const std::pair<const char*, const char*> optional[] = {{"fsdp_auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY"},
                                                           {"fsdp_transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP"},
                                                           {"fsdp_backward_prefetch", "FSDP_BACKWARD_PREFETCH"},
                                                           {"fsdp_state_dict_type", "FSDP_STATE_DICT_TYPE"}};
  for (const auto& [name, var] : optional) {
    if (s.has(name)) vars.emplace_back(var, s.text(name));
  }
  const std::pair<const char*, const char*> lowered[] = {
      {"fsdp_forward_prefetch", "false"},          {"fsdp_use_orig_params", "true"},
      {"fsdp_cpu_ram_efficient_loading", "true"},  {"fsdp_sync_module_states", "true"},
      {"fsdp_activation_checkpointing", "false"}, {"fsdp_activation_checkpointing_offload", "false"}};
  for (const auto& [name, fallback] : lowered) vars.emplace_back(text::upper(name), text::lower(s.text(name, fallback)));
  if (s.has("fsdp_ignored_modules")) vars.emplace_back("FSDP_IGNORED_MODULES", s.text("fsdp_ignored_modules"));
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
  const std::tuple<const char*, const char*, bool> optional[] = {
      {"zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", false},
      {"gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", false},
      {"gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING", true},
      {"offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", true},
      {"offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", true},
      {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", true},
      {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", true},
      {"deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE", false},
      {"deepspeed_moe_layer_cls_names", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", false}};
  for (const auto& [name, var, lowered] : optional) {
    if (s.has(name)) vars.emplace_back(var, lowered ? text::lower(s.text(name)) : s.text(name));
  }
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
  if (precision == "fp8") add_fp8(o, vars);
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
