// dtl-train's flags and the launcher's environment, parsed into plain structs and checked before
// anything heavy starts, so bad input costs one line and exit code 2 instead of a stack trace.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtl::train {

/// Looks up an environment variable; std::nullopt when unset (tests pass a map).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

struct ModelShape {
  int layers = 6;
  int width = 384;
  int heads = 6;
  int context = 128;  ///< tokens per sequence the model sees
  int vocab = 256;
  double dropout = 0.0;
};

struct TrainOptions {
  ModelShape model;
  std::string preset = "default";
  int batch_size = 8;  ///< sequences per rank per micro-batch
  int grad_accum = 1;  ///< micro-batches per optimizer step; only the last one communicates
  long long steps = 100;
  double lr = 1e-3;
  double min_lr = -1;  ///< end of the cosine; negative means lr / 10
  long long warmup = -1;  ///< warmup steps; negative means min(100, steps / 10)
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  ///< max global gradient norm; 0 disables clipping
  unsigned long long seed = 1234;
  std::string data;  ///< text file for byte-level LM; empty means synthetic tokens
  std::string backend = "auto";  ///< auto, nccl or gloo
  std::string device = "auto";   ///< auto, cpu or cuda
  std::string mixed_precision = "no";  ///< no, bf16 or fp16
  std::string loss_scale = "auto";  ///< dynamic, none, or auto: dynamic with fp16, else none
  bool activation_checkpointing = false;  ///< recompute each block's activations in backward
  int zero = 0;  ///< ZeRO stage: 0 (DDP), 1 (optimizer state sharded), 2 (and gradients), 3 (and parameters)
  /// none, or cpu: each rank's shard of AdamW state and its step in host memory (a CUDA run with
  /// ZeRO 1-3); on a CPU run the state is there already, and it changes nothing
  std::string offload_optimizer = "none";
  std::string kernels = "fused";  ///< fused (fused_ops.h where they apply) or torch (torch's ops only)
  /// Which of torch's scaled_dot_product_attention kernels may run where it runs: auto (torch picks),
  /// cudnn, flash, efficient or math
  std::string attention = "auto";
  double bucket_mb = 25;
  double timeout_s = 300;  ///< collectives and the store give up after this long
  std::string checkpoint_dir;
  long long checkpoint_every = 50;
  std::string metrics;  ///< JSON-lines file written by rank 0
  long long log_every = 10;
  double peak_tflops = 0;  ///< one device's peak for the precision used; > 0 adds MFU to the logs
  /// {CKPT_DIR, OUT}: make the sharded checkpoint in CKPT_DIR whole in OUT, and train nothing.
  std::vector<std::string> consolidate;
  std::string dump_params;  ///< directory: each rank writes its final parameters there
  long long fail_at_step = -1;  ///< fault injection for tests, only on the first attempt
  int fail_rank = 0;
  /// raise (error file, exit 1), kill (SIGKILL), hang (peers must time out) or nonfinite (the
  /// rank's gradients of that step are made infinite: a loss scaler skips the step)
  std::string fail_how = "raise";
  /// Where the settings that accelerate's variables may give came from, for the start line:
  /// "--grad_accum", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS" or "default" (the preset's).
  std::map<std::string, std::string> sources;

  double effective_min_lr() const { return min_lr < 0 ? lr / 10 : min_lr; }
  long long effective_warmup() const { return warmup < 0 ? std::min<long long>(100, steps / 10) : warmup; }
};

/// What torchrun (or dtlaunch) tells a worker about its place in the job.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  ///< 0: not launched; a single process then needs no store
  int restart_count = 0;
  /// TORCHELASTIC_USE_AGENT_STORE=True: the launcher's agent serves the store, rank 0 only connects.
  bool agent_store = false;
  std::string error_file;  ///< TORCHELASTIC_ERROR_FILE, empty when unset
  std::optional<std::string> cuda_visible_devices;
  std::vector<std::string> gloo_ifnames;  ///< GLOO_SOCKET_IFNAME, comma-separated
};

struct ParseResult {
  std::optional<TrainOptions> options;  ///< set when training should start
  int exit_code = 0;                    ///< otherwise: exit with this code ...
  std::string output;                   ///< ... after printing this (help, or one error line)
};

/// Parses the arguments after argv[0]; errors are one line starting "dtl-train: error: ".
/// What dtlaunch (or accelerate launch) exports from accelerate's files and flags is read from
/// `env` for each setting whose flag is not given: ACCELERATE_MIXED_PRECISION,
/// ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_GRADIENT_CLIPPING and, in an FSDP run,
/// FSDP_ACTIVATION_CHECKPOINTING, and the ZeRO stage from ACCELERATE_DEEPSPEED_ZERO_STAGE or
/// FSDP_SHARDING_STRATEGY (FULL_SHARD is stage 3, SHARD_GRAD_OP 2, NO_SHARD 0), and the optimizer's
/// offload from ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE. What dtl-train cannot do is refused
/// in one line: sharding within a node (HYBRID_*), offload to NVMe, and the parameters' offload.
ParseResult parse_train_args(const std::vector<std::string>& args, const EnvLookup& env);

/// The launcher's variables; throws std::invalid_argument naming the variable and its value.
LaunchEnv read_launch_env(const EnvLookup& env);

/// The problem with these options, or "" when none (shapes, ranges, names). Pure.
std::string check_options(const TrainOptions& o);

/// Which CUDA device a local rank drives: its own index when it sees the whole node, the only one
/// when the launcher narrowed CUDA_VISIBLE_DEVICES to one GPU; -1 when it sees too few.
int cuda_index_for(int local_rank, int visible_devices);

/// Parameter count of this shape (the output layer shares the token embedding). Pure arithmetic.
long long parameter_count(const ModelShape& s);

/// Forward+backward FLOPs per token (6N plus attention), for MFU.
double flops_per_token(const ModelShape& s);

/// The process environment, for the real binary.
EnvLookup process_env();

}  // namespace dtl::train
