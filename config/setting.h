// The names of dtlaunch's settings, as the flag table (config/flags.h) has a row for each: what
// LaunchOptions::sources is keyed by, so that a misspelt setting does not compile.
#pragma once

#include <string>

namespace dtl::config {

/// Every setting, in the table's order (which is --print_config's order).
enum class Setting {
  nproc_per_node, nnodes, node_rank, master_addr, master_port, agent_store, standalone, rdzv_backend,
  rdzv_endpoint, rdzv_id, rdzv_conf, local_addr, rdzv_token, rdzv_token_file, run_id, max_restarts, monitor_interval,
  start_method, role, no_python, module, run_path, log_dir, redirects, tee, local_ranks_filter,
  log_line_prefix_template, duplicate_stdout_filters, duplicate_stderr_filters, dedup_lines, logs_specs,
  event_log_handler, metrics_port, metrics_addr,
  shutdown_timeout, hang_timeout, on_hang, signals_to_handle, job_cgroup, numa_binding, virtual_local_rank, use_env, no_local_rank, gpu_ids, gpu_visibility, fake_gpus, mixed_precision, use_cpu, debug,
  // many nodes from one command (fanout/fanout.h)
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

/// The setting's name: `--name`, PET_NAME and its config-file key (the flag table's).
std::string setting_name(Setting s);

}  // namespace dtl::config
