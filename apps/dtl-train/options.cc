#include "options.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

namespace dtl::train {
namespace {

/// Presets fill the model shape and batch; flags given on the command line override them.
std::optional<TrainOptions> preset(const std::string& name) {
  TrainOptions o;
  o.preset = name;
  if (name == "default") return o;  // ~10.8M parameters: trains in seconds on a CPU
  if (name == "tiny") {
    o.model = {2, 64, 4, 32, 256, 0.0};
    return o;
  }
  if (name == "gpt2-small") {  // GPT-2 small's shape (124M parameters with the tied embedding)
    o.model = {12, 768, 12, 1024, 50304, 0.0};
    o.lr = 6e-4;
    return o;
  }
  return std::nullopt;
}

/// The preset is applied before the other flags, wherever it appears.
std::string find_preset(const std::vector<std::string>& args) {
  std::string name = "default";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--preset" && i + 1 < args.size()) name = args[i + 1];
    if (args[i].rfind("--preset=", 0) == 0) name = args[i].substr(9);
  }
  return name;
}

int parse_int(const EnvLookup& env, const std::string& name, int fallback, int min) {
  auto v = env(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v->c_str(), &end, 10);
  if (errno || *end || n < min || n > 1'000'000'000) {
    throw std::invalid_argument(name + ": expected an integer >= " + std::to_string(min) + " (got '" + *v + "')");
  }
  return static_cast<int>(n);
}

/// accelerate's str_to_bool: 1 for y/yes/t/true/on/1, 0 for n/no/f/false/off/0, else -1.
int str_to_bool(std::string v) {
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "y" || v == "yes" || v == "t" || v == "true" || v == "on" || v == "1") return 1;
  if (v == "n" || v == "no" || v == "f" || v == "false" || v == "off" || v == "0") return 0;
  return -1;
}

/// The settings accelerate's variables give, for those whose flag was not given (`given`), with
/// their sources; a bad value or a sharded run is one line.
std::string apply_accelerate_env(TrainOptions& v, const std::set<std::string>& given, const EnvLookup& env) {
  auto read = [&](const std::string& var) {
    auto value = env(var);
    return value ? *value : std::string();
  };
  for (const char* name :
       {"mixed_precision", "grad_accum", "grad_clip", "activation_checkpointing", "zero", "offload_optimizer"}) {
    v.sources[name] = given.count(name) ? std::string("--") + name : "default";
  }
  if (const std::string mp = read("ACCELERATE_MIXED_PRECISION"); !mp.empty() && !given.count("mixed_precision")) {
    if (mp != "no" && mp != "bf16" && mp != "fp16") {
      return "ACCELERATE_MIXED_PRECISION=" + mp + " is not supported (use no, bf16 or fp16)";
    }
    v.mixed_precision = mp;
    v.sources["mixed_precision"] = "ACCELERATE_MIXED_PRECISION";
  }
  if (const std::string n = read("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"); !n.empty() && !given.count("grad_accum")) {
    char* end = nullptr;
    errno = 0;
    const long steps = std::strtol(n.c_str(), &end, 10);
    if (errno || *end || steps < 1 || steps > 1'000'000) {
      return "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=" + n + ": expected an integer >= 1";
    }
    v.grad_accum = static_cast<int>(steps);
    v.sources["grad_accum"] = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS";
  }
  // "auto" leaves it to DeepSpeed's own config in accelerate; here, to dtl-train's default.
  if (const std::string c = read("ACCELERATE_GRADIENT_CLIPPING"); !c.empty() && c != "auto" && !given.count("grad_clip")) {
    char* end = nullptr;
    const double clip = std::strtod(c.c_str(), &end);
    if (*end || !(clip >= 0) || clip > 1e30) return "ACCELERATE_GRADIENT_CLIPPING=" + c + ": expected a number >= 0";
    v.grad_clip = clip;
    v.sources["grad_clip"] = "ACCELERATE_GRADIENT_CLIPPING";
  }
  const bool fsdp = str_to_bool(read("ACCELERATE_USE_FSDP")) == 1;
  if (fsdp && !given.count("activation_checkpointing")) {
    if (const std::string a = read("FSDP_ACTIVATION_CHECKPOINTING"); !a.empty()) {
      if (str_to_bool(a) < 0) return "FSDP_ACTIVATION_CHECKPOINTING=" + a + ": expected true or false";
      v.activation_checkpointing = str_to_bool(a) == 1;
      v.sources["activation_checkpointing"] = "FSDP_ACTIVATION_CHECKPOINTING";
    }
  }
  // Sharding, in accelerate's terms.
  if (str_to_bool(read("ACCELERATE_USE_DEEPSPEED")) == 1) {
    const std::string stage = read("ACCELERATE_DEEPSPEED_ZERO_STAGE");
    if (!stage.empty() && stage != "0" && stage != "1" && stage != "2" && stage != "3") {
      return "ACCELERATE_DEEPSPEED_ZERO_STAGE=" + stage + ": expected 0, 1, 2 or 3";
    }
    if (!stage.empty() && !given.count("zero")) {
      v.zero = stage[0] - '0';
      v.sources["zero"] = "ACCELERATE_DEEPSPEED_ZERO_STAGE";
    }
    const std::string offload = read("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE");
    if (!offload.empty() && !given.count("offload_optimizer")) {
      if (offload == "nvme") {
        return "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=nvme: dtl-train offloads the optimizer to host memory "
               "(cpu), not to NVMe";
      }
      if (offload != "none" && offload != "cpu") {
        return "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=" + offload + ": expected none, cpu or nvme";
      }
      v.offload_optimizer = offload;
      v.sources["offload_optimizer"] = "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE";
    }
    // DeepSpeed offloads parameters at stage 3 only ("valid only with stage 3"); so would dtl-train.
    const std::string params = read("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE");
    if (v.zero == 3 && !params.empty() && params != "none") {
      return "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=" + params +
             ": dtl-train keeps the parameters on its device (it offloads only the optimizer: offload_optimizer_device)";
    }
  }
  if (const std::string p = read("FSDP_OFFLOAD_PARAMS"); fsdp && !p.empty()) {
    if (str_to_bool(p) < 0) return "FSDP_OFFLOAD_PARAMS=" + p + ": expected true or false";
    if (str_to_bool(p) == 1) {
      return "FSDP_OFFLOAD_PARAMS=" + p +
             ": dtl-train keeps the parameters on its device (it offloads only the optimizer, in a DeepSpeed run or "
             "with --offload_optimizer cpu)";
    }
  }
  if (fsdp) {
    // accelerate's default is FULL_SHARD; it takes the strategy's number (1-5) too.
    const std::string strategy = read("FSDP_SHARDING_STRATEGY");
    int stage = -1;
    if (strategy.empty() || strategy == "FULL_SHARD" || strategy == "1") stage = 3;
    if (strategy == "SHARD_GRAD_OP" || strategy == "2") stage = 2;
    if (strategy == "NO_SHARD" || strategy == "3") stage = 0;
    if (stage < 0) {
      return "FSDP_SHARDING_STRATEGY=" + strategy +
             ": dtl-train shards over every rank (FULL_SHARD, SHARD_GRAD_OP) or not at all (NO_SHARD), not within a node";
    }
    if (!given.count("zero")) {
      v.zero = stage;
      v.sources["zero"] = "FSDP_SHARDING_STRATEGY";
    }
  }
  return "";
}

}  // namespace

std::string check_options(const TrainOptions& o) {
  std::ostringstream e;
  const ModelShape& m = o.model;
  if (m.layers < 1) e << "--layers must be >= 1 (got " << m.layers << ")";
  else if (m.width < 1) e << "--width must be >= 1 (got " << m.width << ")";
  else if (m.heads < 1) e << "--heads must be >= 1 (got " << m.heads << ")";
  else if (m.width % m.heads != 0) e << "--heads " << m.heads << " does not divide --width " << m.width;
  else if (m.context < 1) e << "--context must be >= 1 (got " << m.context << ")";
  else if (m.vocab < 2) e << "--vocab must be >= 2 (got " << m.vocab << ")";
  else if (!o.data.empty() && m.vocab < 256)
    e << "--data is read as bytes and needs --vocab >= 256 (got " << m.vocab << ")";
  else if (m.dropout < 0 || m.dropout >= 1) e << "--dropout must be in [0, 1) (got " << m.dropout << ")";
  else if (o.batch_size < 1) e << "--batch_size must be >= 1 (got " << o.batch_size << ")";
  else if (o.grad_accum < 1) e << "--grad_accum must be >= 1 (got " << o.grad_accum << ")";
  else if (o.steps < 0) e << "--steps must be >= 0 (got " << o.steps << ")";
  else if (!(o.lr > 0)) e << "--lr must be > 0 (got " << o.lr << ")";
  else if (o.min_lr > o.lr) e << "--min_lr " << o.min_lr << " is above --lr " << o.lr;
  else if (o.weight_decay < 0) e << "--weight_decay must be >= 0 (got " << o.weight_decay << ")";
  else if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1)
    e << "--beta1 and --beta2 must be in [0, 1) (got " << o.beta1 << ", " << o.beta2 << ")";
  else if (o.grad_clip < 0) e << "--grad_clip must be >= 0 (got " << o.grad_clip << ")";
  else if (o.backend != "auto" && o.backend != "nccl" && o.backend != "gloo")
    e << "--backend must be auto, nccl or gloo (got '" << o.backend << "')";
  else if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    e << "--device must be auto, cpu or cuda (got '" << o.device << "')";
  else if (o.mixed_precision != "no" && o.mixed_precision != "bf16" && o.mixed_precision != "fp16")
    e << "--mixed_precision must be no, bf16 or fp16 (got '" << o.mixed_precision << "')";
  else if (o.loss_scale != "auto" && o.loss_scale != "dynamic" && o.loss_scale != "none")
    e << "--loss_scale must be auto, dynamic or none (got '" << o.loss_scale << "')";
  else if (o.zero < 0 || o.zero > 3) e << "--zero must be 0, 1, 2 or 3 (got " << o.zero << ")";
  else if (o.offload_optimizer != "none" && o.offload_optimizer != "cpu")
    e << "--offload_optimizer must be none or cpu (got '" << o.offload_optimizer << "')";
  else if (o.kernels != "fused" && o.kernels != "torch")
    e << "--kernels must be fused or torch (got '" << o.kernels << "')";
  else if (o.attention != "auto" && o.attention != "cudnn" && o.attention != "flash" && o.attention != "efficient" &&
           o.attention != "math")
    e << "--attention must be auto, cudnn, flash, efficient or math (got '" << o.attention << "')";
  else if (!(o.bucket_mb > 0)) e << "--bucket_mb must be > 0 (got " << o.bucket_mb << ")";
  else if (!(o.timeout_s > 0)) e << "--timeout must be > 0 seconds (got " << o.timeout_s << ")";
  else if (o.checkpoint_every < 1) e << "--checkpoint_every must be >= 1 (got " << o.checkpoint_every << ")";
  else if (o.peak_tflops < 0) e << "--peak_tflops must be >= 0 (got " << o.peak_tflops << ")";
  else if (o.log_every < 1) e << "--log_every must be >= 1 (got " << o.log_every << ")";
  else if (o.fail_how != "raise" && o.fail_how != "kill" && o.fail_how != "hang" && o.fail_how != "nonfinite")
    e << "--fail_how must be raise, kill, hang or nonfinite (got '" << o.fail_how << "')";
  return e.str();
}

ParseResult parse_train_args(const std::vector<std::string>& args, const EnvLookup& env) {
  CLI::App app{"dtl-train: data-parallel training of a small decoder-only transformer (libtorch, NCCL or Gloo).\n"
               "Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as set by dtlaunch or torchrun.",
               "dtl-train"};
  const std::string preset_name = find_preset(args);
  auto preset_options = preset(preset_name);
  if (!preset_options) {
    return {std::nullopt, 2, "dtl-train: error: --preset must be default, tiny or gpt2-small (got '" + preset_name + "')"};
  }
  TrainOptions v = *preset_options;  // flags given on the command line override the preset
  app.add_option("--preset", v.preset, "default (~10M parameters), tiny, or gpt2-small (124M)");
  app.add_option("--layers", v.model.layers, "transformer blocks");
  app.add_option("--width", v.model.width, "model width (embedding size)");
  app.add_option("--heads", v.model.heads, "attention heads; must divide --width");
  app.add_option("--context,--seq_len", v.model.context, "tokens per sequence");
  app.add_option("--vocab", v.model.vocab, "vocabulary size (>= 256 with --data)");
  app.add_option("--dropout", v.model.dropout, "dropout probability (default 0)");
  app.add_option("--batch_size", v.batch_size, "sequences per rank per micro-batch (global batch = this x world x grad_accum)");
  auto* accum = app.add_option("--grad_accum", v.grad_accum,
                               "micro-batches per step; gradients are communicated on the last only "
                               "(default: ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1)");
  app.add_option("--steps", v.steps, "optimizer steps in total (a resumed run continues up to this)");
  app.add_option("--lr", v.lr, "peak learning rate (AdamW)");
  app.add_option("--min_lr", v.min_lr, "learning rate at the end of the cosine (default lr/10)");
  app.add_option("--warmup", v.warmup, "linear warmup steps (default min(100, steps/10))");
  app.add_option("--weight_decay", v.weight_decay, "AdamW weight decay on matrices (default 0.1)");
  app.add_option("--beta1", v.beta1, "AdamW beta1 (default 0.9)");
  app.add_option("--beta2", v.beta2, "AdamW beta2 (default 0.95)");
  auto* clip = app.add_option("--grad_clip", v.grad_clip,
                              "clip the global gradient norm to this; 0 disables (default: ACCELERATE_GRADIENT_CLIPPING, else 1)");
  app.add_option("--seed", v.seed, "seed of the initial parameters and of the synthetic data");
  app.add_option("--data", v.data, "text file for byte-level language modelling (default: synthetic tokens)");
  app.add_option("--backend", v.backend, "auto, nccl or gloo (auto: NCCL on CUDA when built with it, else Gloo)");
  app.add_option("--device", v.device, "auto, cpu or cuda");
  auto* mp = app.add_option("--mixed_precision", v.mixed_precision,
                 "no, bf16 or fp16 (default: ACCELERATE_MIXED_PRECISION, else no); fp16 scales the loss");
  app.add_option("--loss_scale", v.loss_scale,
                 "dynamic (torch's GradScaler: from 2^16, a step with non-finite gradients is skipped and halves "
                 "it, 2000 clean steps double it), none, or auto (default: dynamic with fp16, else none)");
  auto* zero = app.add_option("--zero", v.zero,
                              "ZeRO stage: 0 (data parallel), 1 (each rank keeps and steps its shard of the AdamW "
                              "state), 2 (and of the gradients), 3 (and of the parameters: each block's are "
                              "gathered just before it runs) (default: accelerate's DeepSpeed or FSDP variables, "
                              "else 0)");
  auto* offload = app.add_option("--offload_optimizer", v.offload_optimizer,
                                  "none or cpu: with --zero 1-3 on a GPU, each rank's shard of the AdamW state and "
                                  "its step stay in host memory, as DeepSpeed's ZeRO-Offload (on a CPU run they are "
                                  "there already) (default: ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE, else none)");
  auto* checkpointing = app.add_flag("--activation_checkpointing", v.activation_checkpointing,
               "recompute each block's activations in backward: less memory, the same gradients "
               "(default: FSDP_ACTIVATION_CHECKPOINTING in an FSDP run, else off)");
  app.add_option("--kernels,--cpu_kernels", v.kernels,
                 "fused (default: the fused classifier; on CPU float tensors dtl-train's GELU and causal attention, "
                 "elsewhere torch's scaled_dot_product_attention) or torch (torch's ops)");
  app.add_option("--attention", v.attention,
                 "auto (default: torch picks), cudnn, flash, efficient or math: the only kernel torch's "
                 "scaled_dot_product_attention may run, where it runs (libtorch 2.5+; 1.x has only math)");
  app.add_option("--bucket_mb", v.bucket_mb, "gradient bucket size in MB for the overlapped allreduce (default 25)");
  app.add_option("--timeout", v.timeout_s, "seconds a collective may wait for a peer before failing (default 300)");
  app.add_option("--checkpoint_dir", v.checkpoint_dir, "directory of the checkpoint; resumed from at start when present");
  app.add_option("--checkpoint_every", v.checkpoint_every, "steps between checkpoints (default 50)");
  app.add_option("--metrics", v.metrics, "JSON-lines file of the logged steps (rank 0)");
  app.add_option("--log_every", v.log_every, "steps between log lines (default 10)");
  app.add_option("--peak_tflops", v.peak_tflops, "a device's peak TFLOP/s (H200 bf16 dense: 989); adds MFU to the logs");
  app.add_option("--consolidate", v.consolidate,
                 "CKPT_DIR OUT: make the ZeRO checkpoint in CKPT_DIR whole, in OUT/checkpoint.pt, which a run of "
                 "any --zero stage and world size can start from; then exit (give the run's model flags)")
      ->expected(2);
  app.add_option("--dump_params", v.dump_params, "directory where each rank writes its final parameters (rank<R>.bin)");
  app.add_option("--fail_at_step", v.fail_at_step, "testing: fail at the start of this step on the first attempt");
  app.add_option("--fail_rank", v.fail_rank, "testing: the rank that fails (default 0)");
  app.add_option("--fail_how", v.fail_how, "testing: raise (exception, error file), kill (SIGKILL), hang (stop responding) or "
                 "nonfinite (infinite gradients on that step)");

  app.allow_extras();  // unknown options are reported below, one line naming the first
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, 0, app.help()};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, 2, std::string("dtl-train: error: ") + e.what() + " (see dtl-train --help)"};
  }
  if (auto extra = app.remaining(); !extra.empty()) {
    const std::string& first = extra.front();
    return {std::nullopt, 2,
            "dtl-train: error: " + (first.rfind("-", 0) == 0 ? "unknown option " + first : "unexpected argument '" + first + "'") +
                " (see dtl-train --help)"};
  }
  std::set<std::string> given;
  for (const auto& [name, option] : {std::pair{"mixed_precision", mp}, {"grad_accum", accum}, {"grad_clip", clip},
                                     {"activation_checkpointing", checkpointing}, {"zero", zero},
                                     {"offload_optimizer", offload}}) {
    if (option->count()) given.insert(name);
  }
  if (std::string problem = apply_accelerate_env(v, given, env); !problem.empty()) {
    return {std::nullopt, 2, "dtl-train: error: " + problem};
  }
  if (std::string problem = check_options(v); !problem.empty()) {
    return {std::nullopt, 2, "dtl-train: error: " + problem};
  }
  return {v, 0, ""};
}

LaunchEnv read_launch_env(const EnvLookup& env) {
  LaunchEnv e;
  e.rank = parse_int(env, "RANK", 0, 0);
  e.world_size = parse_int(env, "WORLD_SIZE", 1, 1);
  e.local_rank = parse_int(env, "LOCAL_RANK", 0, 0);
  e.master_port = parse_int(env, "MASTER_PORT", 0, 1);
  e.restart_count = parse_int(env, "TORCHELASTIC_RESTART_COUNT", 0, 0);
  e.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";  // torch's test, to the letter
  if (e.master_port > 65535) throw std::invalid_argument("MASTER_PORT: not a port (got " + std::to_string(e.master_port) + ")");
  if (auto a = env("MASTER_ADDR"); a && !a->empty()) e.master_addr = *a;
  if (auto f = env("TORCHELASTIC_ERROR_FILE")) e.error_file = *f;
  e.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
  if (auto names = env("GLOO_SOCKET_IFNAME"); names && !names->empty()) {
    std::stringstream s(*names);
    for (std::string n; std::getline(s, n, ',');) {
      if (!n.empty()) e.gloo_ifnames.push_back(n);
    }
  }
  if (e.rank >= e.world_size) {
    throw std::invalid_argument("RANK=" + std::to_string(e.rank) + " is not below WORLD_SIZE=" +
                                std::to_string(e.world_size));
  }
  if (e.world_size > 1 && e.master_port == 0) {
    throw std::invalid_argument("WORLD_SIZE=" + std::to_string(e.world_size) +
                                " but MASTER_PORT is not set (start dtl-train with dtlaunch or torchrun)");
  }
  return e;
}

int cuda_index_for(int local_rank, int visible_devices) {
  if (local_rank < visible_devices) return local_rank;
  if (visible_devices == 1) return 0;
  return -1;
}

long long parameter_count(const ModelShape& s) {
  const long long w = s.width;
  const long long block = 2 * 2 * w + (3 * w * w + 3 * w) + (w * w + w) + (4 * w * w + 4 * w) + (4 * w * w + w);
  return static_cast<long long>(s.vocab) * w + static_cast<long long>(s.context) * w + s.layers * block + 2 * w;
}

double flops_per_token(const ModelShape& s) {
  // 6 FLOPs per parameter and token (the position table does no matmul) + attention (PaLM's 12 L C T).
  const double n = static_cast<double>(parameter_count(s) - static_cast<long long>(s.context) * s.width);
  return 6.0 * n + 12.0 * s.layers * s.width * s.context;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

}  // namespace dtl::train
