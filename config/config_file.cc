#include "config/config_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "config/flags.h"
#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// A user's mistake in the file, already formatted with its location.
struct Bad {
  std::string message;
};

/// YAML 1.1's booleans (accelerate's files are read by PyYAML, where `no` is false).
std::optional<bool> yaml_bool(const std::string& s) {
  static const std::set<std::string> yes = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string> no = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  if (yes.count(s)) return true;
  if (no.count(s)) return false;
  return std::nullopt;
}

bool plain(const YAML::Node& n) { return n.Tag() == "?"; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Scalar: return "'" + printable(n.Scalar()) + "'";
    default: return "nothing";
  }
}

/// One `key: value` of the top-level map, with where each part is.
struct Entry {
  std::string name;
  YAML::Node key;
  YAML::Node value;
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(printable(path)) {}

  std::string at(const YAML::Mark& m) const {
    if (m.is_null()) return path_;
    return path_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  /// Where a value is; `key:` with nothing after it points at the key.
  std::string at(const Entry& e) const { return at(e.value.IsNull() ? e.key.Mark() : e.value.Mark()); }
  std::string where(const Entry& e) const { return at(e) + ": " + printable(e.name); }

  [[noreturn]] void fail(const Entry& e, const std::string& what) const { throw Bad{where(e) + ": " + what}; }
  [[noreturn]] void expected(const Entry& e, const std::string& what) const {
    fail(e, "expected " + what + ", got " + describe(e.value));
  }

  std::vector<Entry> entries(const YAML::Node& root) const {
    if (!root.IsMap()) {
      throw Bad{at(root.Mark()) + ": expected a map of settings (key: value lines), got " + describe(root)};
    }
    std::vector<Entry> out;
    std::map<std::string, int> first_line;
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (!it->first.IsScalar()) {
        throw Bad{at(it->first.Mark()) + ": expected a key name, got " + describe(it->first)};
      }
      Entry e{it->first.Scalar(), it->first, it->second};
      auto [pos, fresh] = first_line.emplace(e.name, e.key.Mark().line + 1);
      if (!fresh) fail(e, "set twice (first on line " + std::to_string(pos->second) + ")");
      out.push_back(std::move(e));
    }
    return out;
  }

  std::string scalar(const Entry& e, const std::string& what = "a single value") const {
    if (!e.value.IsScalar()) expected(e, what);
    return e.value.Scalar();
  }

  bool boolean(const Entry& e) const {
    if (e.value.IsScalar()) {
      const std::string& s = e.value.Scalar();
      if (auto b = yaml_bool(s)) return *b;
      if (s == "1" || s == "0") return s == "1";
    }
    expected(e, "true or false");
  }

  long integer(const Entry& e, long lo, long hi, const std::string& what) const {
    if (e.value.IsScalar()) {
      auto v = text::to_long(e.value.Scalar());
      if (v && *v >= lo && *v <= hi) return *v;
    }
    expected(e, what);
  }

  /// A list of scalars, or one scalar ("0,2"), as the comma-separated text a flag takes.
  std::string list(const Entry& e) const {
    if (e.value.IsScalar()) return e.value.Scalar();
    if (e.value.IsSequence()) {
      std::vector<std::string> items;
      for (const auto& item : e.value) {
        if (!item.IsScalar()) expected(e, "a list of single values");
        items.push_back(item.Scalar());
      }
      return text::join(items);
    }
    expected(e, "a list or a comma-separated value");
  }

  /// mixed_precision: unquoted `no` is YAML 1.1's false, and means 'no'.
  std::string precision(const Entry& e) const {
    std::string s = scalar(e);
    if (plain(e.value) && yaml_bool(s) == false) return "no";
    return s;
  }

  FileValue value(const Entry& e, std::string v, std::string note = "") const {
    check_length(e, v);
    return FileValue{std::move(v), where(e), std::move(note)};
  }

  void check_length(const Entry& e, const std::string& v) const {
    if (v.size() > kMaxValueBytes) {
      fail(e, "expected a value of at most " + std::to_string(kMaxValueBytes) + " bytes, got " +
                  std::to_string(v.size()));
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;  ///< printable: it starts every message
};

bool valid_variable_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

void read_env(const Reader& r, const Entry& e, ConfigFile& out) {
  if (e.value.IsNull()) return;
  if (!e.value.IsMap()) r.expected(e, "a map of VARIABLE: value");
  std::set<std::string> seen;
  for (auto it = e.value.begin(); it != e.value.end(); ++it) {
    Entry var{it->first.IsScalar() ? it->first.Scalar() : "", it->first, it->second};
    if (!it->first.IsScalar() || !valid_variable_name(var.name)) {
      throw Bad{r.at(it->first.Mark()) + ": env: expected variable names like NCCL_DEBUG, got " +
                describe(it->first)};
    }
    var.name = "env: " + var.name;  // how messages name it
    const std::string name = it->first.Scalar();
    if (!seen.insert(name).second) throw Bad{r.at(var) + ": " + name + ": set twice in env"};
    std::string v = var.value.IsNull() ? "" : var.value.IsScalar() ? var.value.Scalar() : "";
    if (!var.value.IsNull() && !var.value.IsScalar()) r.expected(var, "a single value");
    out.env.emplace_back(name, r.value(var, v));
  }
}

/// A key's value as the flag of the same name takes it.
std::string flag_text(const Reader& r, const Entry& e, Type type) {
  switch (type) {
    case Type::switch_: return r.boolean(e) ? "1" : "0";
    case Type::list: return r.list(e);
    case Type::text_or_no: return r.precision(e);
    case Type::text: break;
  }
  return r.scalar(e);
}

/// " (did you mean nproc_per_node? ...)" for a key that is no row of the table.
std::string unknown_key_hint(const std::string& key) {
  std::vector<std::string> keys{"env"};
  for (const auto& f : flags()) {
    if (key == f.accelerate_key) {
      return " (did you mean " + std::string(f.name) + "? " + key +
             " is accelerate's key, read only from files that have distributed_type)";
    }
    keys.push_back(f.name);
  }
  std::string near = did_you_mean(key, keys);
  return near.empty() ? " (the keys are dtlaunch's flag names, see dtlaunch --help, and env)"
                      : " (did you mean " + near + "?)";
}

void read_dtlaunch(const Reader& r, const std::vector<Entry>& entries, ConfigFile& out) {
  for (const auto& e : entries) {
    if (e.name == "env") {
      read_env(r, e, out);
      continue;
    }
    const Flag* f = find_flag(e.name);
    if (!f) throw Bad{r.at(e.key.Mark()) + ": " + printable(e.name) + ": unknown key" + unknown_key_hint(e.name)};
    if (e.value.IsNull()) continue;
    out.values[e.name] = r.value(e, flag_text(r, e, f->type));
  }
}

/// Empty, false, 'no' or made of such values only: a section or key left at its default. Aliases let
/// a small file nest a map in itself 2^n times, or inside itself (`a: &a {b: *a}`): `budget` counts
/// the nodes looked at in the whole file, `depth` the levels, and past either a value counts as set
/// (it is then only named in a warning).
bool unset(const YAML::Node& n, int& budget, int depth = 0) {
  if (--budget < 0 || depth > 32) return false;
  switch (n.Type()) {
    case YAML::NodeType::Null: return true;
    case YAML::NodeType::Scalar: return n.Scalar().empty() || yaml_bool(n.Scalar()) == false || n.Scalar() == "0";
    case YAML::NodeType::Sequence: return n.size() == 0;
    case YAML::NodeType::Map:
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!unset(it->second, budget, depth + 1)) return false;
      }
      return true;
    default: return true;
  }
}

/// A value of one of accelerate's sections as accelerate's namespace holds it: str() of what PyYAML
/// read, so an unquoted `true` is "True"; switches as a flag gives them.
std::string accelerate_text(const Reader& r, const Entry& e, const Flag& f) {
  if (f.type == Type::text && e.value.IsScalar() && plain(e.value)) {
    if (auto b = yaml_bool(e.value.Scalar())) return *b ? "True" : "False";
  }
  return flag_text(r, e, f.type);
}

/// fp8_config's override_linear_precision as accelerate's setup_fp8_env reads it: items 0, 1 and 2
/// of what PyYAML gave, as str(): a list's values (`False`), or a string's first three characters.
FileValue override_precision(const Reader& r, const Entry& e) {
  if (e.value.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& item : e.value) {
      if (!item.IsScalar()) r.expected(e, "a list of three booleans");
      auto b = plain(item) ? yaml_bool(item.Scalar()) : std::nullopt;
      items.push_back(b ? (*b ? "True" : "False") : item.Scalar());
    }
    if (items.size() < 3) r.expected(e, "a list of three booleans");
    return r.value(e, text::join(items));
  }
  const std::string text = r.scalar(e, "a list of three booleans");
  if (text.size() < 3) r.expected(e, "a list of three booleans");
  return r.value(e, text, kOverrideCharacters);
}

/// deepspeed_config, fsdp_config, dynamo_config and fp8_config: each key is accelerate's flag of the same
/// name (fsdp_config's `x` is `fsdp_x`, fp8_config's `fp8_x`, dynamo_config's `dynamo_x`); a key that is
/// no such flag is named in the file's warning, since no worker sees it.
void read_accelerate_sections(const Reader& r, const std::map<std::string, const Entry*>& by_name, ConfigFile& out,
                              int& budget) {
  static const std::pair<const char*, const char*> sections[] = {
      {"deepspeed_config", ""}, {"fsdp_config", "fsdp_"}, {"dynamo_config", "dynamo_"}, {"fp8_config", "fp8_"}};
  std::vector<std::string> unknown;
  for (const auto& [section, prefix] : sections) {
    auto it = by_name.find(section);
    if (it == by_name.end() || it->second->value.IsNull()) continue;
    const Entry& e = *it->second;
    if (!e.value.IsMap()) r.expected(e, "a map of settings");
    for (auto kv = e.value.begin(); kv != e.value.end(); ++kv) {
      std::string key = kv->first.Scalar();
      if (std::string(section) == "deepspeed_config") out.deepspeed_fields.push_back(key);
      std::string name = key.rfind(prefix, 0) == 0 ? key : prefix + key;
      if (std::string(prefix) == "fsdp_" && key.rfind("fsdp", 0) == 0) name = key;
      Entry inner{std::string(section) + "." + key, kv->first, kv->second};
      const Flag* f = find_flag(name);
      if (!f || !f->accelerate_only) {
        if (!unset(kv->second, budget)) unknown.push_back(inner.name);
        continue;
      }
      if (kv->second.IsNull()) continue;
      if (f->id == Setting::fp8_override_linear_precision) {
        out.values[name] = override_precision(r, inner);
        continue;
      }
      out.values[name] = r.value(inner, accelerate_text(r, inner, *f));
    }
  }
  if (!unknown.empty()) {
    out.warnings.push_back(r.path() + ": ignoring " + printable(text::join(unknown, ", ")) +
                           " (not among accelerate launch's settings, so accelerate passes them to no worker either)");
  }
}

/// accelerate's own check (BaseConfig.from_yaml_file): a key that is no field of its config class,
/// after it has converted the old `fp16` and `dynamo_backend` keys, refuses the file.
void refuse_unknown_accelerate_keys(const Reader& r, const std::vector<Entry>& entries) {
  static const std::set<std::string> base = {"compute_environment", "distributed_type", "mixed_precision", "use_cpu",
                                             "debug", "enable_cpu_affinity", "dynamo_config", "gpu_ids",
                                             "num_machines", "fp16", "dynamo_backend"};
  static const std::set<std::string> cluster = {
      "num_processes", "machine_rank", "main_process_ip", "main_process_port", "rdzv_backend", "same_network",
      "main_training_function", "fp8_config", "deepspeed_config", "fsdp_config", "parallelism_config",
      "megatron_lm_config", "mpirun_config", "downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster",
      "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env"};
  static const std::set<std::string> sagemaker = {
      "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "base_job_name", "pytorch_version",
      "transformers_version", "py_version", "sagemaker_inputs_file", "sagemaker_metrics_file", "additional_args"};
  bool on_sagemaker = false;
  for (const auto& e : entries) {
    if (e.name == "compute_environment" && e.value.IsScalar()) on_sagemaker = e.value.Scalar() == "AMAZON_SAGEMAKER";
  }
  const auto& own = on_sagemaker ? sagemaker : cluster;
  std::vector<const Entry*> unknown;
  for (const auto& e : entries) {
    if (!base.count(e.name) && !own.count(e.name)) unknown.push_back(&e);
  }
  if (unknown.empty()) return;
  std::string also;
  for (size_t i = 1; i < unknown.size(); ++i) also += (i == 1 ? " (also " : ", ") + printable(unknown[i]->name);
  if (!also.empty()) also += ")";
  throw Bad{r.at(unknown.front()->key.Mark()) + ": " + printable(unknown.front()->name) + ": unknown key" + also +
            ": accelerate launch refuses a file with keys its config does not have (dtlaunch's own keys go in a "
            "file without distributed_type)"};
}

void read_accelerate(const Reader& r, const std::vector<Entry>& entries, ConfigFile& out) {
  refuse_unknown_accelerate_keys(r, entries);
  std::map<std::string, const Entry*> by_name;
  for (const auto& e : entries) by_name[e.name] = &e;
  auto get = [&](const std::string& name) -> const Entry* {
    auto it = by_name.find(name);
    return it == by_name.end() || it->second->value.IsNull() ? nullptr : it->second;
  };

  const Entry* type = get("distributed_type");
  if (!type) {
    throw Bad{r.path() + ": distributed_type: missing; accelerate's files name the kind of job "
                         "(NO, MULTI_CPU, MULTI_GPU, ...)"};
  }
  const std::string dist = text::upper(r.scalar(*type));
  static const std::set<std::string> gpu_types = {"MULTI_GPU", "DEEPSPEED", "FSDP", "MEGATRON_LM"};
  if (!gpu_types.count(dist) && dist != "NO" && dist != "MULTI_CPU") {
    r.expected(*type, "one of NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM (dtlaunch starts CPU and "
                      "CUDA jobs)");
  }

  bool cpu = dist == "MULTI_CPU";
  if (const Entry* e = get("use_cpu")) {
    out.use_cpu = r.boolean(*e);
    cpu = cpu || out.use_cpu;
    out.values["use_cpu"] = r.value(*e, cpu ? "1" : "0");
  }
  if (cpu && !out.values.count("use_cpu")) out.values["use_cpu"] = r.value(*type, "1");
  // The launcher accelerate would pick, as its flags name it.
  static const std::map<std::string, std::string> launcher_flag = {
      {"MULTI_GPU", "multi_gpu"}, {"FSDP", "use_fsdp"}, {"DEEPSPEED", "use_deepspeed"}};
  if (auto it = launcher_flag.find(dist); it != launcher_flag.end()) out.values[it->second] = r.value(*type, "1");

  long machines = 1;
  if (const Entry* e = get("num_machines")) {
    machines = r.integer(*e, 1, 1 << 20, "an integer >= 1");
    out.values["nnodes"] = r.value(*e, std::to_string(machines));
  }
  if (const Entry* e = get("machine_rank")) {
    long rank = r.integer(*e, 0, 1 << 20, "an integer >= 0");
    if (rank >= machines) {
      r.fail(*e, "expected a rank in 0.." + std::to_string(machines - 1) + " for num_machines=" +
                     std::to_string(machines) + ", got " + std::to_string(rank));
    }
    out.values["node_rank"] = r.value(*e, std::to_string(rank));
  }
  const Entry* nproc = get("num_processes");
  if (nproc && nproc->value.IsScalar() && nproc->value.Scalar() == "-1") nproc = nullptr;  // accelerate's "unset"
  if (nproc) {
    long total = r.integer(*nproc, 1, 1 << 20, "an integer >= 1");
    if (total % machines != 0) {
      r.fail(*nproc, "expected a total divisible by num_machines=" + std::to_string(machines) +
                         " (num_processes counts the processes of all machines), got " + std::to_string(total));
    }
    std::string note = machines > 1 ? "total " + std::to_string(total) + " over " + std::to_string(machines) +
                                          " machines"
                                    : "";
    out.values["nproc_per_node"] = r.value(*nproc, std::to_string(total / machines), note);
  } else if (gpu_types.count(dist) && !cpu) {
    out.values["nproc_per_node"] = r.value(*type, "gpu", "no num_processes: one per GPU");
  }

  const Entry* ip = get("main_process_ip");
  const Entry* port = get("main_process_port");
  long port_number = 29500;
  if (port) port_number = r.integer(*port, 0, 65535, "a port in 0..65535");
  std::string address = ip ? r.scalar(*ip) : "";
  bool same_network = true;
  if (const Entry* e = get("same_network")) same_network = r.boolean(*e);
  // DeepSpeed's own launchers start every machine from this one (dtlaunch's ssh fan-out), whose
  // first host is machine 0 unless main_process_ip says otherwise.
  const Entry* ds_launcher = get("deepspeed_multinode_launcher");
  const std::string ds_launcher_name = ds_launcher ? text::lower(r.scalar(*ds_launcher)) : "pdsh";
  const bool fanned_out = dist == "DEEPSPEED" && ds_launcher_name != "standard" && ds_launcher_name != "nossh";
  if (machines > 1 && address.empty() && fanned_out) {
    if (port) out.values["master_port"] = r.value(*port, std::to_string(port_number));
  } else if (machines > 1) {
    if (address.empty()) {
      r.fail(*get("num_machines"), std::to_string(machines) +
                                       " machines need main_process_ip, the address of machine 0");
    }
    if (same_network) {
      out.values["master_addr"] = r.value(*ip, address);
      if (port) out.values["master_port"] = r.value(*port, std::to_string(port_number));
    } else {
      std::string endpoint = address + ":" + std::to_string(port_number);
      out.values["rdzv_endpoint"] = r.value(*ip, endpoint, "main_process_ip:main_process_port, same_network: false");
    }
  } else if (port) {
    out.values["master_port"] = r.value(*port, std::to_string(port_number));
  }
  if (const Entry* e = get("gpu_ids"); e && !cpu) {
    std::string ids = r.list(*e);
    if (text::lower(text::trim(ids)) != "all") out.values["gpu_ids"] = r.value(*e, ids);
  }
  int budget = 100000;  // nodes unset() may look at
  if (const Entry* e = get("mpirun_config"); e && !unset(e->value, budget)) {
    r.fail(*e, "accelerate runs mpirun for this; dtlaunch starts the CPU processes itself (several machines: "
               "--nnodes and a dtlaunch per machine, or --hostfile): drop mpirun_config");
  }
  read_accelerate_sections(r, by_name, out, budget);
  // What accelerate does and dtlaunch does not: named once, unless left at its default.
  std::set<std::string> acted_on = {"distributed_type", "same_network", "deepspeed_config", "fsdp_config",
                                    "dynamo_config", "fp8_config"};
  for (const auto& f : flags()) {
    if (!*f.accelerate_key) continue;
    acted_on.insert(f.accelerate_key);
    if (const Entry* e = get(f.accelerate_key); e && f.accelerate_as_is) out.values[f.name] = r.value(*e, flag_text(r, *e, f.type));
  }
  std::vector<std::string> ignored;
  if (dist == "MEGATRON_LM") ignored.push_back("distributed_type: " + dist);
  for (const auto& e : entries) {
    if (acted_on.count(e.name)) continue;
    if (e.name == "compute_environment") {
      if (e.value.IsScalar() && e.value.Scalar() != "LOCAL_MACHINE") ignored.push_back(e.name + ": " + e.value.Scalar());
      continue;
    }
    if (!unset(e.value, budget)) ignored.push_back(e.name);
  }
  if (!ignored.empty()) {
    out.warnings.push_back(r.path() + ": ignoring " + printable(text::join(ignored, ", ")) +
                           " (accelerate features that dtlaunch does not set up; it launches the processes only)");
  }
}

/// Where each document of a stream starts, and its first node.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts, nodes;

  void OnDocumentStart(const YAML::Mark& m) override { starts.push_back(m); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { node(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { node(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(m);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& m) {
    if (nodes.size() < starts.size()) nodes.push_back(m);
  }
};

/// The stream holds one document, whose parse ends. yaml-cpp 0.7 (Debian 12's) loops forever on a
/// token that starts no node, such as `,` outside brackets (its issue #1040): each turn of LoadAll
/// adds an empty document and consumes nothing, until memory runs out. Upstream stops when a
/// document consumes nothing (PR #1319, then commit f25f110); this does the same from outside,
/// through the library's public event parser, reading at most three documents and failing at the
/// first that starts where the one before it started. Throws YAML::ParserException as the parse does.
Status check_documents(const std::string& text, const Reader& r) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts docs;
  while (docs.starts.size() < 3 && parser.HandleNextDocument(docs)) {
    const auto& s = docs.starts;
    if (s.size() >= 2 && s[s.size() - 1].pos == s[s.size() - 2].pos) {
      const YAML::Mark& m = s.back();
      const std::string token = m.pos >= 0 && static_cast<size_t>(m.pos) < text.size() ? text.substr(m.pos, 1) : "";
      return fail(r.at(m) + ": YAML syntax error: unexpected '" + printable(token) + "'");
    }
  }
  // PyYAML (accelerate) refuses a second document; YAML::Load would ignore it without a word.
  if (docs.starts.size() > 1) {
    const YAML::Mark& m = docs.nodes.size() > 1 ? docs.nodes[1] : docs.starts[1];
    return fail(r.at(m) + ": expected one YAML document, got a second one (after '---')");
  }
  return {};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto norm = [](std::string s) {
    s = text::lower(std::move(s));
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  const std::string w = norm(word);
  std::string best;
  size_t best_distance = std::max<size_t>(2, w.size() / 3) + 1;
  for (const auto& c : candidates) {
    if (w.size() > c.size() + best_distance) continue;  // the distance is at least the difference in length
    size_t d = edit_distance(w, norm(c));
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

Result<ConfigFile> parse_config(const std::string& text, const std::string& path) {
  Reader r(path);
  ConfigFile out;
  out.path = path;
  if (text.size() > kMaxConfigFileBytes) {
    return fail(r.path() + ": " + std::to_string(text.size()) + " bytes, more than a config file may have (" +
                std::to_string(kMaxConfigFileBytes) + ")");
  }
  try {
    YAML::Node root;
    try {
      if (auto checked = check_documents(text, r); !checked) return tl::unexpected(checked.error());
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      return fail(r.at(e.mark) + ": YAML syntax error: " + printable(e.msg));
    }
    if (root.IsNull()) return out;  // an empty file, or comments only
    auto entries = r.entries(root);
    bool accelerate = std::any_of(entries.begin(), entries.end(), [](const Entry& e) {
      return e.name == "distributed_type" || e.name == "compute_environment";
    });
    if (accelerate) {
      out.format = ConfigFile::Format::accelerate;
      read_accelerate(r, entries, out);
    } else {
      read_dtlaunch(r, entries, out);
    }
  } catch (const Bad& bad) {
    return fail(bad.message);
  } catch (const YAML::Exception& e) {
    return fail(r.at(e.mark) + ": " + e.msg);
  }
  return out;
}

std::string default_config_path(const EnvLookup& env) {
  auto xdg = env("XDG_CONFIG_HOME");
  if (xdg && !xdg->empty()) return *xdg + "/dtlaunch/default_config.yaml";
  auto home = env("HOME");
  if (home && !home->empty()) return *home + "/.config/dtlaunch/default_config.yaml";
  return "";
}

std::optional<ConfigLocation> locate_config(const std::optional<std::string>& flag, const EnvLookup& env) {
  if (flag) {
    if (flag->empty()) return std::nullopt;
    return ConfigLocation{*flag, "--config_file"};
  }
  if (auto v = env("DTLAUNCH_CONFIG_FILE")) {
    if (v->empty()) return std::nullopt;
    return ConfigLocation{*v, "DTLAUNCH_CONFIG_FILE"};
  }
  std::string path = default_config_path(env);
  if (path.empty()) return std::nullopt;
  return ConfigLocation{path, "default"};
}

Result<std::optional<ConfigFile>> load_config(const std::optional<ConfigLocation>& where, const ReadFile& files) {
  if (!where) return std::nullopt;
  FileRead read = files(where->path);
  if (read.status == FileRead::Status::missing && where->chosen_by == "default") return std::nullopt;
  if (read.status != FileRead::Status::ok) {
    std::string who = where->chosen_by == "default" ? printable(where->path) : where->chosen_by;
    return fail(who + ": cannot read '" + printable(where->path) + "': " + read.text);
  }
  return parse_config(read.text, where->path).map([](ConfigFile file) {
    return std::optional<ConfigFile>(std::move(file));
  });
}

std::string yaml_scalar(const std::string& s) {
  if (s.empty()) return "''";
  // Control characters only in double quotes, escaped, so that every value stays on its line.
  if (std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    std::string out = "\"";
    for (char c : s) {
      const unsigned char u = static_cast<unsigned char>(c);
      out += c == '"' ? "\\\"" : c == '\\' ? "\\\\" : u < 0x20 || u == 0x7f ? printable(std::string(1, c)) : std::string(1, c);
    }
    return out + "\"";
  }
  bool safe = !yaml_bool(s) && s != "null" && s != "Null" && s != "NULL" && s != "~" &&
              s.front() != ' ' && s.back() != ' ' && !std::strchr("-?:,[]{}#&*!|>'\"%@`", s.front());
  for (char c : s) {
    safe = safe && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./:,-+@=", c));
  }
  if (safe && s.find(": ") == std::string::npos) return s;
  return "'" + text::replace_all(s, "'", "''") + "'";
}

std::string format_settings(const std::string& header, const std::vector<EffectiveSetting>& settings,
                            const std::vector<EffectiveSetting>& env) {
  auto shown = [](const EffectiveSetting& s) {
    if (s.is_switch) return std::string(s.value == "1" ? "true" : "false");
    return s.value.empty() ? std::string("~") : yaml_scalar(s.value);
  };
  // The comments line up after the longest line of at most 60 columns; a longer line (a long value)
  // has its comment right after it, so the output grows with the values, not with their square.
  constexpr size_t kAlignUpTo = 60;
  size_t width = 0;
  auto fit = [&](size_t w) { width = w <= kAlignUpTo ? std::max(width, w) : width; };
  for (const auto& s : settings) fit(s.name.size() + 2 + shown(s).size());
  for (const auto& s : env) fit(s.name.size() + 4 + yaml_scalar(s.value).size());
  std::string out = header;
  auto line = [&](const std::string& text, const std::string& source) {
    out += text + std::string(width - std::min(width, text.size()) + 2, ' ') + "# " + source + "\n";
  };
  for (const auto& s : settings) {
    if (!s.comment.empty()) out += "# " + s.comment + "\n";
    line(s.name + ": " + shown(s), s.source);
  }
  if (!env.empty()) {
    out += "env:\n";
    for (const auto& s : env) line("  " + s.name + ": " + yaml_scalar(s.value), s.source);
  }
  return out;
}

}  // namespace dtl::config
