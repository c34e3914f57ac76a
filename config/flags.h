// dtlaunch's settings as one table: a row per setting, with its spellings, the variables that stand
// in for it, its config-file keys, how its text parses into LaunchOptions, its default and its help.
// The command line, the PET_* fallback, the config files, --print_config, the wizard, --help and
// README's flag table all read this table; a new setting is one row.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/launch_options.h"

namespace dtl::config {

/// Every setting, in the table's order (which is --print_config's order).
enum class Setting {
  nproc_per_node, nnodes, node_rank, master_addr, master_port, agent_store, standalone, rdzv_backend,
  rdzv_endpoint, rdzv_id, rdzv_conf, local_addr, rdzv_token, rdzv_token_file, run_id, max_restarts, monitor_interval,
  start_method, role, no_python, module, run_path, log_dir, redirects, tee, local_ranks_filter,
  log_line_prefix_template, duplicate_stdout_filters, duplicate_stderr_filters, logs_specs, event_log_handler,
  shutdown_timeout, hang_timeout, on_hang, signals_to_handle, job_cgroup, numa_binding, virtual_local_rank, use_env, no_local_rank, gpu_ids, gpu_visibility, fake_gpus, mixed_precision, use_cpu, debug,
  // many nodes from one command (launcher/fanout.h)
  launcher, hostfile, hosts, include, exclude, ssh_port, ssh_command, export_, remote_dtlaunch, node_name,
  // accelerate launch's own settings (config/accelerate.h turns them into the workers' variables)
  same_network, multi_gpu, use_fsdp, use_deepspeed, num_cpu_threads_per_process, enable_cpu_affinity,
  main_training_function, downcast_bf16, quiet, dynamo_backend, dynamo_mode, dynamo_use_fullgraph, dynamo_use_dynamic,
  dynamo_use_regional_compilation, fsdp_version, fsdp_offload_params, fsdp_min_num_params, fsdp_sharding_strategy,
  fsdp_reshard_after_forward, fsdp_auto_wrap_policy, fsdp_transformer_layer_cls_to_wrap, fsdp_backward_prefetch,
  fsdp_state_dict_type, fsdp_forward_prefetch, fsdp_use_orig_params, fsdp_cpu_ram_efficient_loading,
  fsdp_sync_module_states, fsdp_activation_checkpointing, fsdp_activation_checkpointing_offload, fsdp_ignored_modules,
  zero_stage, offload_optimizer_device, offload_param_device, offload_optimizer_nvme_path, offload_param_nvme_path,
  gradient_accumulation_steps, gradient_clipping, zero3_init_flag, zero3_save_16bit_model, deepspeed_config_file,
  deepspeed_multinode_launcher, deepspeed_hostfile, deepspeed_exclusion_filter, deepspeed_inclusion_filter,
  deepspeed_moe_layer_cls_names, fp8_backend, fp8_use_autocast_during_eval, fp8_margin, fp8_interval, fp8_format,
  fp8_amax_history_len, fp8_amax_compute_algo, fp8_override_linear_precision, fp8_opt_level,
  fp8_enable_fsdp_float8_all_gather, fp8_pad_inner_dim,
};

/// How a config file writes the value.
enum class Type {
  text,        ///< one scalar
  switch_,     ///< a flag without a value; a YAML boolean in files
  list,        ///< "0,2" or a YAML list
  text_or_no,  ///< a scalar where YAML's unquoted `no` (false) means the word "no"
};

struct Flag {
  Setting id;
  const char* name;              ///< `--name`, `--name-with-dashes`, PET_NAME, and the config file's key
  const char* short_name = "";   ///< "-r", or ""
  std::vector<const char*> variables = {};  ///< looked up after PET_NAME, in order
  const char* accelerate_key = "";          ///< accelerate's name for the setting, or ""
  bool accelerate_as_is = false;  ///< accelerate's key holds the value as is (else config_file.cc maps it)
  Type type = Type::text;
  const char* default_value = "";  ///< the text a flag would give; "" is unset
  const char* default_shown = "";  ///< what an unset default means, for --help and README, or ""
  const char* group = "";          ///< the --help section
  const char* help = "";           ///< one line; `code` in backquotes
  std::vector<const char*> choices = {};  ///< the words the value may be (completion offers them)
  bool names_path = false;                ///< the value is a file or folder (completion offers paths)
  /// Parses the text into `o`; throws std::invalid_argument with the reason ("expected ...").
  void (*apply)(const std::string& text, LaunchOptions& o) = nullptr;
  /// accelerate launch's spelling of this setting when it differs (`num_processes`), or "". Given in
  /// that spelling, the value has accelerate's meaning (command_line.cc converts it).
  const char* accelerate_flag = "";
  /// accelerate's own setting: the text, as given, goes to LaunchOptions::accelerate.values.
  bool accelerate_only = false;
  /// A secret: its variables are kept from the workers' environment.
  bool secret = false;
  /// Other tools' names of the same setting with the same meaning (deepspeed's `num_gpus`).
  std::vector<const char*> aliases = {};
};

/// The table, one row per Setting, in Setting order.
const std::vector<Flag>& flags();
const Flag& flag(Setting id);
/// The row named `name` ("nproc_per_node"), or nullptr.
const Flag* find_flag(const std::string& name);

/// "--nproc_per_node" and "--nproc-per-node" (one when the name has no `_`).
std::vector<std::string> long_spellings(const Flag& f);
/// PET_NAME, then the row's own variables.
std::vector<std::string> variable_names(const Flag& f);
/// The variables of every secret setting (PET_RDZV_TOKEN, DTLAUNCH_RDZV_TOKEN): dtlaunch reads
/// them, its workers never see them.
std::vector<std::string> secret_variables();
/// accelerate launch's flags that dtlaunch refuses, and why, for "--flag": "" when dtlaunch knows
/// no such accelerate flag.
std::string refused_accelerate_flag(const std::string& flag);
/// The --help sections, in order.
std::vector<std::string> help_groups();
/// README's flag tables, one per --help section (flag | default | meaning).
std::string flags_markdown();

/// Pure value parsers, for the table and their own tests; each throws std::invalid_argument with
/// the reason.
/// A switch's text: 1/true/True/yes, or 0/false/False/no/empty.
bool parse_bool(const std::string& text);
NprocSpec parse_nproc(const std::string& text);
StreamsSpec parse_streams(const std::string& text);
std::set<int> parse_rank_list(const std::string& text);
std::vector<int> parse_signal_list(const std::string& text);
std::vector<int> parse_gpu_ids(const std::string& text);
/// `--nnodes`: N or MIN:MAX with 0 < MIN <= MAX.
std::pair<int, int> parse_nnodes(const std::string& text);
/// `--rdzv_conf`'s `k=v,k=v` items, trimmed; throws on an item without a key or a value.
std::vector<std::pair<std::string, std::string>> parse_rdzv_items(const std::string& text);
/// The items with torch's meaning for the backend in use (static or c10d). A key torch ignores is
/// ignored here too and named in `ignored` ("'foo' (why)"), when given.
RdzvConf parse_rdzv_conf(const std::string& text, bool static_backend = false,
                         std::vector<std::string>* ignored = nullptr);

}  // namespace dtl::config
