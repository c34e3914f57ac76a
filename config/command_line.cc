#include "config/command_line.h"

#include <csignal>
#include <cstdlib>
#include <algorithm>
#include <stdexcept>
#include <tuple>

#include <CLI/CLI.hpp>

#include "config/config_file.h"
#include "config/text.h"

namespace dtl::config {
namespace {

using text::split;
using text::trim;

/// Strict integer: the whole text, in [lo, hi].
long parse_int(const std::string& text, long lo, long hi, const char* what) {
  std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  long v = t.empty() ? 0 : std::strtol(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    throw std::invalid_argument(std::string("expected ") + what);
  }
  return v;
}

bool parse_bool(const std::string& text) {
  std::string t = trim(text);
  if (t == "1" || t == "true" || t == "True" || t == "yes") return true;
  if (t == "0" || t == "false" || t == "False" || t == "no" || t.empty()) return false;
  throw std::invalid_argument("expected 1 or 0");
}

/// One flag as the user may spell it, with the variable that may stand in for it.
struct Flag {
  std::string name;  ///< canonical, with underscores: "nproc_per_node"
  std::string value;
  bool is_flag = false;  ///< takes no value on the command line
  std::vector<std::string> extra_env;  ///< fallbacks after PET_<NAME>, in order
  CLI::Option* option = nullptr;
  std::string source;  ///< where the value came from, for error messages; empty: default
  bool from_file = false;  ///< `source` is a config file location: "cfg.yaml:3:17: key"
  std::string note;        ///< how the file's keys became the value (accelerate's num_processes)
};

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
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
  const char* what = "0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs like 0:1,1:3";
  StreamsSpec spec;
  std::string t = trim(text);
  if (t.find(':') == std::string::npos) {
    spec.all = static_cast<Streams>(parse_int(t, 0, 3, what));
    return spec;
  }
  for (const auto& item : split(t, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument(std::string("expected ") + what);
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
  const char* what = "N or MIN:MAX with 0 < MIN <= MAX";
  auto colon = text.find(':');
  int min = static_cast<int>(parse_int(text.substr(0, colon), 1, 1 << 20, what));
  int max = colon == std::string::npos ? min : static_cast<int>(parse_int(text.substr(colon + 1), 1, 1 << 20, what));
  if (max < min) throw std::invalid_argument(std::string("expected ") + what);
  return {min, max};
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  if (trim(text).empty()) return conf;
  auto seconds = [](const std::string& key, const std::string& v) {
    char* end = nullptr;
    double s = std::strtod(v.c_str(), &end);
    // the timers count milliseconds: less than one would be a zero interval or timeout
    if (v.empty() || *end != '\0' || !(s >= 0.001) || s > 1e7) {
      throw std::invalid_argument(key + " expects seconds >= 0.001 (got '" + v + "')");
    }
    return s;
  };
  for (const auto& item : split(text, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("'" + item + "' is not key=value");
    std::string key = trim(item.substr(0, eq)), v = trim(item.substr(eq + 1));
    if (key == "join_timeout" || key == "timeout") {
      conf.join_timeout_s = seconds(key, v);
    } else if (key == "last_call_timeout") {
      conf.last_call_timeout_s = seconds(key, v);
    } else if (key == "close_timeout") {
      conf.close_timeout_s = seconds(key, v);
    } else if (key == "keep_alive_interval") {
      conf.keep_alive_interval_s = seconds(key, v);
    } else if (key == "keep_alive_max_attempt") {
      conf.keep_alive_max_attempt = static_cast<int>(parse_int(v, 1, 1000, "keep_alive_max_attempt: an integer >= 1"));
    } else if (key == "heartbeat_timeout") {
      conf.keep_alive_max_attempt = std::max(1, static_cast<int>(seconds(key, v) / conf.keep_alive_interval_s + 0.5));
    } else if (key == "is_host") {
      conf.is_host = parse_bool(v);
    } else if (key == "read_timeout") {
      seconds(key, v);  // torchrun's store read timeout: dtlaunch's reads are event-driven
    } else {
      throw std::invalid_argument("unknown key '" + key +
                                  "' (known: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                                  "keep_alive_max_attempt, heartbeat_timeout, is_host, read_timeout)");
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
    std::string name = upper(item);
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    int found = 0;
    for (const auto& [n, s] : known) {
      if (name == n) found = s;
    }
    if (!found) {
      throw std::invalid_argument("unknown signal '" + item +
                                  "' (use SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU)");
    }
    sigs.push_back(found);
  }
  return sigs;
}

namespace {

/// The launcher's own arguments (up to the program) rewritten where torchrun's argparse and CLI11
/// read them differently: `--flag=` is an empty value (CLI11 would take the next argument as the
/// value), and `-r=3` is `-r 3` (CLI11 would read '=3').
std::vector<std::string> argparse_spellings(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program and its arguments
    const bool is_long = a[1] == '-';
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (!opt) break;  // unknown: CLI11 says so
    const bool takes_value = opt->get_expected_min() > 0;
    if (takes_value && eq != std::string::npos && (eq + 1 == a.size() || !is_long)) {
      out.push_back(name);
      out.push_back(a.substr(eq + 1));
      continue;
    }
    out.push_back(a);
    const bool attached = eq != std::string::npos || (!is_long && a.size() > 2);
    if (takes_value && !attached && i + 1 < args.size()) out.push_back(args[++i]);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace

ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env,
                               const ReadFile& files) {
  CLI::App app{"dtlaunch: start one worker per GPU with torchrun's environment, and supervise them",
               "dtlaunch"};
  app.prefix_command();
  app.set_version_flag("--version", "dtlaunch " DTL_VERSION);
  app.footer("Every --flag_name is also accepted as --flag-name and as the variable PET_FLAG_NAME\n"
             "(the flag wins over the variable, which wins over the config file). Documentation: README.md.\n"
             "Also: dtlaunch config (write a config file by answering questions; --help for more),\n"
             "dtlaunch env (versions, GPUs and settings, for a bug report).");

  std::vector<Flag> flags;
  flags.reserve(40);
  auto add = [&](const std::string& name, const std::string& help, std::string def = "",
                 std::vector<std::string> extra_env = {}, const std::string& short_name = "") -> Flag& {
    Flag& f = flags.emplace_back(Flag{name, std::move(def), false, std::move(extra_env), nullptr, "", false, ""});
    std::string names = "--" + name;
    std::string dashed = name;
    for (auto& c : dashed) c = c == '_' ? '-' : c;
    if (dashed != name) names += ",--" + dashed;
    if (!short_name.empty()) names = short_name + "," + names;
    // Given twice, the last value wins, as with torchrun's argparse (wrappers append overrides).
    f.option = app.add_option(names, f.value, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    return f;
  };
  auto add_flag = [&](const std::string& name, const std::string& help, const std::string& short_name = "") -> Flag& {
    Flag& f = flags.emplace_back(Flag{name, "", true, {}, nullptr, "", false, ""});
    std::string names = "--" + name;
    std::string dashed = name;
    for (auto& c : dashed) c = c == '_' ? '-' : c;
    if (dashed != name) names += ",--" + dashed;
    if (!short_name.empty()) names = short_name + "," + names;
    f.option = app.add_flag(names, help);
    return f;
  };

  add("nproc_per_node", "workers on this node: N, gpu, cpu or auto (default 1)", "1");
  add("nnodes", "number of nodes, N or MIN:MAX (elastic)", "1");
  add("node_rank", "rank of this node (static rendezvous)", "0");
  add("master_addr", "address of the workers' rank 0 (default 127.0.0.1)", "127.0.0.1");
  add("master_port", "port of the workers' rank 0 store; 0 picks a free port (default 29500)", "29500");
  add_flag("standalone", "single node, free port, random run id");
  add("rdzv_backend", "rendezvous backend: static or c10d", "static");
  add("rdzv_endpoint", "rendezvous endpoint host[:port]");
  add("rdzv_id", "job id (alias of --run_id)");
  add("rdzv_conf", "rendezvous settings k=v,k=v (join_timeout, last_call_timeout, keep_alive_interval, ...)");
  add("local_addr", "this node's address, as its workers are reached");
  add("rdzv_token", "shared secret that nodes prove with HMAC-SHA256 (never sent); or DTLAUNCH_RDZV_TOKEN", "",
      {"DTLAUNCH_RDZV_TOKEN"});
  add("rdzv_token_file", "file holding the shared secret");
  add("run_id", "job id, exported as TORCHELASTIC_RUN_ID (default none)");
  add("max_restarts", "restarts of the worker group after a failure (default 0)", "0");
  add("monitor_interval", "accepted for torchrun compatibility; dtlaunch is event-driven");
  add("start_method", "accepted for torchrun compatibility (Python-only)");
  add("role", "role name, in the worker env and log prefixes (default 'default')", "default");
  add_flag("no_python", "exec the program directly instead of through python3 -u");
  add_flag("module", "run the program as a python module (python3 -u -m)", "-m");
  add_flag("run_path", "accepted for torchrun compatibility: runs the script through python3");
  add("log_dir", "base directory for per-rank log and error files (default: a temporary directory)");
  add("redirects", "streams to files: 0 none, 1 out, 2 err, 3 both, or per rank 0:1,1:3", "0", {}, "-r");
  add("tee", "like --redirects, and to the console too", "0", {}, "-t");
  add("local_ranks_filter", "console shows only these local ranks, e.g. 0,1");
  add("shutdown_timeout", "seconds between SIGTERM and SIGKILL when stopping workers (default 30)", "30",
      {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"});
  add("signals_to_handle", "signals forwarded to the workers",
      "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  add("gpu_ids", "use only these GPUs (indices among the visible ones), e.g. 0,2");
  add("gpu_visibility", "per_worker: each worker sees only its GPU; all: every worker sees all (torchrun)",
      "per_worker");
  add("fake_gpus", "pretend this machine has N GPUs (testing without GPUs)", "", {"DTLAUNCH_FAKE_GPUS"});
  add("mixed_precision", "no, fp16, bf16 or fp8: exported to the workers as ACCELERATE_MIXED_PRECISION", "",
      {"ACCELERATE_MIXED_PRECISION"});
  add_flag("use_cpu", "a CPU job: the machine's GPUs are left alone (ACCELERATE_USE_CPU for the workers)")
      .extra_env = {"ACCELERATE_USE_CPU"};
  add_flag("debug", "ACCELERATE_DEBUG_MODE for the workers: accelerate checks collective operations")
      .extra_env = {"ACCELERATE_DEBUG_MODE"};

  // Not settings: which file holds settings, and a look at them.
  std::string config_file_flag;
  CLI::Option* config_option = app.add_option(
      "--config_file,--config-file", config_file_flag,
      "YAML settings (dtlaunch's or accelerate's); default $DTLAUNCH_CONFIG_FILE, else "
      "~/.config/dtlaunch/default_config.yaml when it exists; '' for none")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bool print_config = false;
  app.add_flag("--print_config,--print-config", print_config,
               "print the settings in effect and where each comes from, then exit");

  std::vector<std::string> reversed = argparse_spellings(app, args);
  std::reverse(reversed.begin(), reversed.end());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return {std::nullopt, 0, app.help()};
  } catch (const CLI::CallForVersion& e) {
    return {std::nullopt, 0, e.what()};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, 2, std::string("dtlaunch: error: ") + e.what() + " (see dtlaunch --help)"};
  }

  for (auto& f : flags) {
    if (f.option->count() > 0) {
      f.source = f.option->get_name();
      if (f.is_flag) f.value = "1";
      continue;
    }
    std::vector<std::string> names{"PET_" + upper(f.name)};
    names.insert(names.end(), f.extra_env.begin(), f.extra_env.end());
    for (const auto& n : names) {
      if (auto v = env(n)) {
        f.value = *v;
        f.source = n;
        break;
      }
    }
  }

  // The config file fills what no flag or variable set.
  Schema schema;
  for (const auto& f : flags) {
    schema.keys.push_back(f.name);
    if (f.is_flag) schema.switches.insert(f.name);
  }
  auto location = locate_config(config_option->count() ? std::optional(config_file_flag) : std::nullopt, env);
  auto loaded = load_config(location, files, schema);
  if (auto* error = std::get_if<std::string>(&loaded)) return {std::nullopt, 2, "dtlaunch: error: " + *error};
  const auto& file = std::get<std::optional<ConfigFile>>(loaded);
  if (file) {
    for (auto& f : flags) {
      auto it = file->values.find(f.name);
      if (!f.source.empty() || it == file->values.end()) continue;
      f.value = it->second.value;
      f.source = it->second.where;
      f.note = it->second.note;
      f.from_file = true;
    }
  }

  auto get = [&](const std::string& name) -> Flag& {
    for (auto& f : flags) {
      if (f.name == name) return f;
    }
    throw std::logic_error("no flag " + name);
  };

  LaunchOptions o;
  Flag* current = nullptr;
  try {
    auto value = [&](const std::string& name) -> const std::string& {
      current = &get(name);
      return current->value;
    };
    o.nproc_per_node = parse_nproc(value("nproc_per_node"));
    std::tie(o.min_nodes, o.max_nodes) = parse_nnodes(value("nnodes"));
    o.node_rank = static_cast<int>(parse_int(value("node_rank"), 0, o.max_nodes - 1,
                                             ("a node rank in 0.." + std::to_string(o.max_nodes - 1)).c_str()));
    o.standalone = parse_bool(value("standalone"));
    o.master_addr = trim(value("master_addr"));
    if (o.master_addr.empty()) throw std::invalid_argument("expected a host name or address");
    o.master_port = static_cast<int>(parse_int(value("master_port"), 0, 65535, "a port in 0..65535"));
    o.rdzv_backend = trim(value("rdzv_backend"));
    if (o.rdzv_backend != "static" && o.rdzv_backend != "c10d") throw std::invalid_argument("expected static or c10d");
    o.rdzv_endpoint = trim(value("rdzv_endpoint"));
    o.rdzv_conf = parse_rdzv_conf(value("rdzv_conf"));
    o.local_addr = trim(value("local_addr"));
    o.rdzv_token = value("rdzv_token");
    o.rdzv_token_file = value("rdzv_token_file");
    std::string rdzv_id = value("rdzv_id");
    std::string run_id = value("run_id");
    o.run_id = !run_id.empty() ? run_id : !rdzv_id.empty() ? rdzv_id : "none";
    o.max_restarts = static_cast<int>(parse_int(value("max_restarts"), 0, 1000000, "an integer >= 0"));
    o.role = trim(value("role"));
    if (o.role.empty()) throw std::invalid_argument("expected a non-empty role name");
    o.no_python = parse_bool(value("no_python"));
    o.module = parse_bool(value("module"));
    if (o.module && o.no_python) {
      throw std::invalid_argument("--module runs python -m and cannot be combined with --no_python");
    }
    parse_bool(value("run_path"));
    o.log_dir = value("log_dir");
    o.redirects = parse_streams(value("redirects"));
    o.tee = parse_streams(value("tee"));
    if (!value("local_ranks_filter").empty()) o.local_ranks_filter = parse_rank_list(current->value);
    {
      std::string t = trim(value("shutdown_timeout"));
      char* end = nullptr;
      double v = t.empty() ? -1 : std::strtod(t.c_str(), &end);
      if (t.empty() || *end != '\0' || !(v >= 0) || v > 86400) {
        throw std::invalid_argument("expected seconds >= 0");
      }
      o.shutdown_timeout_s = v;
    }
    o.signals_to_handle = parse_signal_list(value("signals_to_handle"));
    if (!value("gpu_ids").empty() && trim(current->value) != "all") o.gpu_ids = parse_gpu_ids(current->value);
    std::string vis = trim(value("gpu_visibility"));
    if (vis == "per_worker" || vis == "per-worker") {
      o.gpu_visibility = GpuVisibility::per_worker;
    } else if (vis == "all") {
      o.gpu_visibility = GpuVisibility::all;
    } else {
      throw std::invalid_argument("expected per_worker or all");
    }
    if (!value("fake_gpus").empty()) {
      o.fake_gpus = static_cast<int>(parse_int(current->value, 0, 1024, "a GPU count in 0..1024"));
    }
    o.mixed_precision = text::lower(trim(value("mixed_precision")));
    if (!o.mixed_precision.empty() && o.mixed_precision != "no" && o.mixed_precision != "fp16" &&
        o.mixed_precision != "bf16" && o.mixed_precision != "fp8") {
      throw std::invalid_argument("expected one of no, fp16, bf16, fp8");
    }
    o.debug = parse_bool(value("debug"));
    o.use_cpu = parse_bool(value("use_cpu"));

    // Combinations a file can make impossible; the plan checks the same for flags alone.
    const Flag& nproc = get("nproc_per_node");
    const Flag& ids = get("gpu_ids");
    if (o.use_cpu) {
      o.gpu_ids.reset();  // a CPU job uses no GPU (accelerate's CPU files say gpu_ids: all)
      if (o.nproc_per_node.kind == NprocSpec::Kind::gpu) {
        value("nproc_per_node");
        throw std::invalid_argument("expected a count, cpu or auto, since use_cpu is set (" +
                                    (get("use_cpu").source.empty() ? "--use_cpu" : get("use_cpu").source) + ")");
      }
    } else if (o.gpu_ids && o.nproc_per_node.kind == NprocSpec::Kind::count && (nproc.from_file || ids.from_file) &&
               o.nproc_per_node.count > static_cast<int>(o.gpu_ids->size())) {
      value("nproc_per_node");
      throw std::invalid_argument("expected at most " + std::to_string(o.gpu_ids->size()) +
                                  " workers per node, the GPUs listed in gpu_ids (" +
                                  (ids.source.empty() ? "--gpu_ids" : ids.source) + ")");
    }
  } catch (const std::invalid_argument& e) {
    std::string where = current->source.empty() ? "--" + current->name : current->source;
    std::string msg = "dtlaunch: error: " + where + ": " + e.what();
    if (!current->value.empty() && std::string(e.what()).rfind("expected", 0) == 0) {
      if (current->from_file) {
        msg += ", got '" + current->value + "'" + (current->note.empty() ? "" : " (" + current->note + ")");
      } else {
        msg += " (got '" + current->value + "')";
      }
    }
    return {std::nullopt, 2, msg};
  }

  // The file's env: entries, unless the environment already has the variable.
  std::vector<EffectiveSetting> env_settings;
  if (file) {
    for (const auto& [name, v] : file->env) {
      if (auto inherited = env(name)) {
        env_settings.push_back({name, *inherited, "environment (the file says " + yaml_scalar(v.value) + ")"});
      } else {
        o.extra_env.emplace_back(name, v.value);
        env_settings.push_back({name, v.value, v.where});
      }
    }
    o.config_file = file->path;
  }

  auto rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    return {std::nullopt, 2, "dtlaunch: error: unknown option " + rest.front() + " (see dtlaunch --help)"};
  }
  if (print_config) {
    std::string header = "# dtlaunch settings in effect, and where each comes from "
                         "(flag > variable > config file > default)\n# config file: ";
    if (file) {
      header += file->path + (file->format == ConfigFile::Format::accelerate ? " (accelerate's format)"
                                                                             : " (dtlaunch's format)");
    } else if (location) {
      header += "none (" + location->path + " does not exist)";
    } else {
      header += "none";
    }
    header += "\n";
    std::vector<EffectiveSetting> settings;
    for (const auto& f : flags) {
      std::string source = f.source.empty() ? "default" : f.source;
      if (!f.note.empty()) source += " (" + f.note + ")";
      const bool secret = f.name == "rdzv_token" && !f.value.empty();  // `dtlaunch env` output gets pasted
      settings.push_back({f.name, secret ? "<hidden>" : f.value, source, f.is_flag});
    }
    ParseResult shown{std::nullopt, 0, format_settings(header, settings, env_settings)};
    if (file) shown.warnings = file->warnings;
    shown.shown = o;
    return shown;
  }

  if (rest.empty()) {
    return {std::nullopt, 2, "dtlaunch: error: no program to launch (usage: dtlaunch [options] program [args...])"};
  }
  for (const auto& f : flags) {
    if (f.option->count() == 0 && !f.source.empty()) {  // a variable or the config file
      o.sources[f.name] = Source{f.from_file ? Source::Kind::file : Source::Kind::env, f.source, f.note};
    } else if (f.option->count() > 0) {
      o.sources[f.name] = Source{Source::Kind::flag, f.source, ""};
    }
  }
  o.program = rest.front();
  o.program_args.assign(rest.begin() + 1, rest.end());
  ParseResult result{std::move(o), 0, ""};
  if (file) result.warnings = file->warnings;
  return result;
}

ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env) {
  return parse_command_line(args, env, disk_files());
}

}  // namespace dtl::config
