#include "train.h"

#include <time.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/utils.h>
#include <torch/version.h>
#ifdef DTL_WITH_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "atomic_file.h"
#include "autocast.h"
#include "blas.h"
#include "checkpoint.h"
#include "comm.h"
#include "data.h"
#include "fused_ops.h"
#include "loss_scale.h"
#include "metrics.h"
#include "model.h"
#include "optim.h"
#include "report.h"
#include "schedule.h"
#include "zero.h"

namespace dtl::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Placement {
  c10::Device device = c10::kCPU;
  std::string backend;
};

Placement place(const TrainOptions& o, const LaunchEnv& env) {
  const bool cuda = torch::cuda::is_available();
  if (o.device == "cuda" && !cuda) throw UsageError("--device cuda but no CUDA device is usable here");
  if (o.backend == "nccl" && !built_with_nccl()) {
    throw UsageError(
        "--backend nccl: this dtl-train was built without NCCL (scripts/build-cuda.sh builds one with it)");
  }
  if (o.backend == "nccl" && (!cuda || o.device == "cpu")) throw UsageError("--backend nccl needs a CUDA device");
  Placement p;
  if (cuda && o.device != "cpu") {
    const int count = static_cast<int>(torch::cuda::device_count());
    const int index = cuda_index_for(env.local_rank, count);
    if (index < 0) {
      throw UsageError("LOCAL_RANK=" + std::to_string(env.local_rank) + " but only " + std::to_string(count) +
                       " CUDA devices are visible (CUDA_VISIBLE_DEVICES=" + env.cuda_visible_devices.value_or("") +
                       ")");
    }
    p.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  p.backend = o.backend != "auto" ? o.backend : (p.device.is_cuda() && built_with_nccl() ? "nccl" : "gloo");
  return p;
}

/// What the model's GELU, attention and loss run on, for the start line: fused_ops.h's own
/// conditions, asked of tensors like those they will be given (the autocast dtype under autocast),
/// and for torch's attention the kernel torch picks for them.
std::string kernels_used(const TrainOptions& o, c10::Device device, std::optional<c10::ScalarType> autocast) {
  if (o.kernels != "fused") return "torch's ops";
  const auto options = at::TensorOptions(device).dtype(autocast.value_or(at::kFloat));
  const at::Tensor given = at::empty({0}, options);
  const bool gelu = fused_gelu_usable(given);
  std::string why;
  if (o.model.dropout > 0) {
    why = "; dropout";
  } else if (fused_attention_usable(given)) {
    return "fused GELU and attention, fused classifier";
  } else if (gelu) {
    why = "; no sgemm in the process";
  }
  const at::Tensor qkv = at::empty({o.batch_size, o.model.context, 3 * o.model.width}, options);
  return std::string(gelu ? "fused GELU" : "torch's GELU") + ", attention by torch's SDPA (" +
         sdpa_backend(qkv, o.model.heads, o.model.dropout) + why + "), fused classifier";
}

/// --attention: the one kernel torch's scaled_dot_product_attention may pick, by torch's own
/// switches (process-wide); auto leaves them as they are.
void restrict_attention(const std::string& which) {
  if (which == "auto") return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  at::Context& context = at::globalContext();
  context.setSDPUseCuDNN(which == "cudnn");
  context.setSDPUseFlash(which == "flash");
  context.setSDPUseMemEfficient(which == "efficient");
  context.setSDPUseMath(which == "math");
#else
  if (which != "math") {
    throw UsageError("--attention " + which + ": libtorch " + TORCH_VERSION +
                     " lets dtl-train choose none of scaled_dot_product_attention's kernels (2.5+ does)");
  }
#endif
}

size_t parameter_bytes(const std::vector<at::Tensor>& params) {
  size_t bytes = 0;
  for (const auto& p : params) bytes += p.numel() * p.element_size();
  return bytes;
}

/// What a rank holds after a step, counted from the live tensors.
std::string memory_line(const TrainOptions& o, const Reducer& reducer, size_t parameters, size_t state,
                        bool state_on_host) {
  std::ostringstream s;
  s << "dtl-train: rank 0 holds parameters " << parameters << " bytes, gradients " << reducer.gradient_bytes()
    << " bytes, optimizer state " << state << " bytes" << (state_on_host ? " in host memory" : "") << " (--zero "
    << o.zero << ")";
  if (reducer.reduce_scatter_emulated()) {
    s << "; the backend has no reduce_scatter: each gradient bucket is allreduced and this rank's chunk kept "
         "(data parallel's traffic, not half of it)";
  }
  return s.str();
}

/// The most device memory the caching allocator has handed out (torch.cuda.max_memory_allocated);
/// std::nullopt on a CPU or where this build has no CUDA allocator to ask.
std::optional<size_t> peak_device_bytes(c10::Device device) {
#ifdef DTL_WITH_NCCL
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // [StatType::AGGREGATE], a type whose namespace moved in torch 2.5
  }
#endif
  (void)device;
  return std::nullopt;
}

void dump_parameters(const std::string& dir, int rank, Gpt& model) {
  std::vector<at::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kFloat));
  at::Tensor all = torch::cat(flat).contiguous();
  std::filesystem::create_directories(dir);
  write_file_atomically(dir + "/rank" + std::to_string(rank) + ".bin",
                        std::string_view(static_cast<const char*>(all.data_ptr()), all.numel() * sizeof(float)));
}

/// The fault a test asked for, on the first attempt only (so the restarted run goes through).
/// Whether this rank injects the failure `how` at `step` (only on the first attempt).
bool injects(const TrainOptions& o, const LaunchEnv& env, long long step, const std::string& how) {
  return step == o.fail_at_step && env.rank == o.fail_rank && env.restart_count == 0 && o.fail_how == how;
}

void maybe_fail(const TrainOptions& o, const LaunchEnv& env, long long step) {
  if (step != o.fail_at_step || env.rank != o.fail_rank || env.restart_count != 0 || o.fail_how == "nonfinite") return;
  if (o.fail_how == "kill") std::raise(SIGKILL);
  if (o.fail_how == "hang") {
    for (;;) pause();
  }
  throw std::runtime_error("injected failure at step " + std::to_string(step) + " (--fail_at_step)");
}

std::unique_ptr<TokenSource> open_data(const TrainOptions& o) {
  if (o.data.empty()) return std::make_unique<SyntheticTokens>(o.seed, o.model.vocab);
  if (!std::filesystem::is_regular_file(o.data)) throw UsageError("--data " + o.data + ": no such file");
  try {
    return std::make_unique<TextTokens>(o.data, o.model.context, o.seed);
  } catch (const std::runtime_error& e) {
    throw UsageError(std::string("--data: ") + e.what());
  }
}

/// "grad_accum 4 (ACCELERATE_GRADIENT_ACCUMULATION_STEPS)": a setting, its value and its source.
std::string sourced(const TrainOptions& o, const std::string& name, const std::string& value) {
  auto it = o.sources.find(name);
  return name + " " + value + (it == o.sources.end() ? "" : " (" + it->second + ")");
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

/// The dtype the forward autocasts to, std::nullopt for none; UsageError where libtorch has no
/// such autocast on the device.
std::optional<c10::ScalarType> autocast_for(const TrainOptions& o, c10::Device device) {
  if (o.mixed_precision == "no") return std::nullopt;
  const c10::ScalarType dtype = o.mixed_precision == "fp16" ? at::kHalf : at::kBFloat16;
  if (!autocast_supports(dtype, device)) {
    throw UsageError(o.mixed_precision + " mixed precision (" + o.sources.at("mixed_precision") + "): libtorch " +
                     TORCH_VERSION + " has no " + o.mixed_precision + " autocast on " + device.str() +
                     "; fp16 on a CPU needs libtorch 2.5, bf16 works there");
  }
  return dtype;
}

/// Rank 0's first line: the job, the model, the batch, and each setting accelerate may give with
/// where it came from.
std::string start_line(const TrainOptions& o, const LaunchEnv& env, const Placement& placement,
                       const Batching& batching, const Reducer& reducer, const TokenSource& data,
                       const std::string& kernels, const std::optional<LossScaler>& scaler) {
  std::ostringstream s;
  s << "dtl-train: " << env.world_size << " rank(s), " << placement.backend << " on " << placement.device.str() << ", "
    << (parameter_count(o.model) / 1e6) << "M parameters (" << shape_text(o.model) << "), global batch "
    << batching.global() << " x " << o.model.context << " tokens, " << reducer.bucket_count() << " gradient buckets, "
    << flops_per_token(o.model) / 1e6 << " MFLOP/token, mixed precision " << o.mixed_precision << ", " << kernels
    << ", data " << data.describe() << "; " << sourced(o, "mixed_precision", o.mixed_precision) << ", "
    << sourced(o, "grad_accum", std::to_string(o.grad_accum)) << ", " << sourced(o, "grad_clip", c10::str(o.grad_clip))
    << ", " << sourced(o, "activation_checkpointing", o.activation_checkpointing ? "on" : "off") << ", "
    << sourced(o, "zero", std::to_string(o.zero)) << ", " << sourced(o, "offload_optimizer", o.offload_optimizer)
    << (o.offload_optimizer != "cpu" ? ""
        : placement.device.is_cuda() ? " (the host steps on " + std::to_string(at::get_num_threads()) + " threads)"
                                     : " (a CPU run: the state is in host memory already)")
    << ", loss scale " << (scaler ? "dynamic from " + c10::str(scaler->scale()) : std::string("none"));
  return s.str();
}

/// Rank 0's warnings about the BLAS a CPU run multiplies with.
void warn_about_blas() {
  if (auto blas = loaded_blas()) {
    if (auto advice = blas_advice(*blas); !advice.empty()) say("dtl-train: warning: " + advice);
  }
  if (auto core = openblas_core()) {
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const auto set = coretype ? std::optional<std::string>(coretype) : std::nullopt;
    if (auto advice = openblas_core_advice(*core, cpu_has_avx512(), set); !advice.empty()) {
      say("dtl-train: warning: " + advice);
    }
  }
}

/// ZeRO stage 3's units of parameters: one bucket per block, the last block's first (the order
/// backward completes them), then one of the rest (embeddings, final norm).
struct Units {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> block_buckets;  ///< [block]: its bucket
  size_t rest_bucket = 0;
};
Units stage3_units(const Parameters& params, int layers) {
  Units u;
  u.buckets.resize(layers + 1);
  for (int i = 0; i < layers; ++i) u.block_buckets.push_back(layers - 1 - i);
  u.rest_bucket = layers;
  for (size_t k = 0; k < params.names.size(); ++k) {
    int block = -1;
    std::sscanf(params.names[k].c_str(), "blocks.%d.", &block);
    u.buckets[block >= 0 && block < layers ? u.block_buckets[block] : u.rest_bucket].push_back(k);
  }
  return u;
}

/// The whole AdamW. At stage 0 the optimizer the run steps; with ZeRO only what a whole checkpoint's
/// state is read into before each rank takes its pieces of it: over CPU stand-ins of the
/// parameters, so that no GPU holds all of it at once.
FusedAdamW whole_adamw(const TrainOptions& o, const Parameters& params) {
  auto group = [&](bool decayed) {
    std::vector<at::Tensor> members = params.with_decay(decayed);
    if (o.zero > 0) {  // of the parameters' sizes, with no storage: what load checks, and all set_state needs
      for (auto& p : members) p = at::zeros({}).expand(p.sizes());
    }
    return members;
  };
  return FusedAdamW({{group(true), o.weight_decay}, {group(false), 0.0}}, o.lr, o.beta1, o.beta2, 1e-8);
}

/// The optimizer a run steps: the whole AdamW (stage 0), or this rank's shard of it (ZeRO).
struct Optimizer {
  FusedAdamW& whole;
  std::unique_ptr<ShardedAdamW> sharded;

  void set_lr(double lr) { sharded ? sharded->set_lr(lr) : whole.set_lr(lr); }
  void step(const at::Tensor& grad_scale) { sharded ? sharded->step(grad_scale) : whole.step(grad_scale); }
  size_t state_bytes() const { return sharded ? sharded->state_bytes() : whole.state_bytes(); }
  bool state_on_host() const { return sharded && sharded->offloaded(); }
};

/// The steps since the last log line: their wall and CPU time and the reducer's waits.
class Interval {
 public:
  void add(const Reducer& reducer) {
    steps_++;
    wait_ += reducer.last_wait_s();
    busy_ += reducer.last_timing().busy;
    exposed_ += reducer.last_timing().exposed;
  }

  /// The record of the interval that ends now at `step`, without its loss, lr and norm; restarts.
  StepRecord close(const TrainOptions& o, const LaunchEnv& env, long long step, long long tokens_per_step,
                   bool measures_overlap) {
    const double elapsed = seconds_since(start_);
    StepRecord r;
    r.step = step;
    r.steps = o.steps;
    r.step_time_s = elapsed / steps_;
    r.cpu_time_s = (process_cpu_seconds() - cpu_start_) / steps_;
    r.tokens_per_s = tokens_per_step * steps_ / elapsed;
    r.comm_wait_share = wait_ / elapsed;
    r.comm_hidden_share = !measures_overlap ? std::nan("") : busy_ > 0 ? 1.0 - exposed_ / busy_ : 1.0;
    if (o.peak_tflops > 0) r.mfu = r.tokens_per_s / env.world_size * flops_per_token(o.model) / (o.peak_tflops * 1e12);
    r.tokens = step * tokens_per_step;
    r.world_size = env.world_size;
    *this = Interval();
    return r;
  }

  long long steps() const { return steps_; }

  /// Runs `f` (a checkpoint's saving) outside the interval's time.
  template <class F>
  void exclude(F&& f) {
    const auto wall = Clock::now();
    const double cpu = process_cpu_seconds();
    f();
    start_ += Clock::now() - wall;
    cpu_start_ += process_cpu_seconds() - cpu;
  }

 private:
  Clock::time_point start_ = Clock::now();
  double cpu_start_ = process_cpu_seconds();
  double wait_ = 0, busy_ = 0, exposed_ = 0;
  long long steps_ = 0;
};

int train(const TrainOptions& o, const LaunchEnv& env, std::string& doing, std::unique_ptr<Comm>& comm) {
  // Everything a user can get wrong is checked before the first collective, on every rank.
  doing = "reading the data";
  const Batching batching{o.batch_size, o.grad_accum, env.world_size};
  auto data = open_data(o);
  if (auto problem = check_data_fits(*data, batching, o.model.context); !problem.empty()) throw UsageError(problem);
  const Placement placement = place(o, env);
  const c10::Device device = placement.device;
  const std::optional<c10::ScalarType> autocast = autocast_for(o, device);
  restrict_attention(o.attention);
  const std::string kernels = kernels_used(o, device, autocast);
  if (o.attention != "auto" && kernels.find("none fits") != std::string::npos) {
    throw UsageError("--attention " + o.attention + ": torch's scaled_dot_product_attention cannot run it for this " +
                     "model on " + device.str() + " (" + kernels + ")");
  }
  const bool leader = env.rank == 0;
  const std::string checkpoint = o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/checkpoint.pt";

  doing = "building the model";
  torch::manual_seed(o.seed);
  Gpt model(o.model, o.kernels == "fused");
  model->set_activation_checkpointing(o.activation_checkpointing);
  model->to(device);
  model->train();
  const Parameters params = parameters_of(model);
  // torch::optim::AdamW's update (decoupled decay on matrices only), fused into one pass per parameter.
  FusedAdamW whole = whole_adamw(o, params);

  const bool offload = o.offload_optimizer == "cpu" && device.is_cuda();
  if (offload && o.zero == 0) {
    throw UsageError(sourced(o, "offload_optimizer", "cpu") +
                     " steps each rank's shard of AdamW in host memory: it needs --zero 1, 2 or 3");
  }
  const Sharding sharding{o.zero, o.zero > 0 ? env.world_size : 1};
  Progress progress;
  std::optional<Loaded> resumed;
  if (!checkpoint.empty()) {
    std::filesystem::create_directories(o.checkpoint_dir);
    if (leader) remove_stale_temps(checkpoint);
    if (std::filesystem::exists(checkpoint)) {
      doing = "loading " + checkpoint;
      resumed = load_checkpoint(checkpoint, model, whole, device, &sharding);
      progress = resumed->progress;
      if (leader) say("resumed from " + checkpoint + " at step " + std::to_string(progress.step));
    }
  }

  doing = "connecting to rank 0's store at " + env.master_addr + ":" + std::to_string(env.master_port);
  comm = connect(env, placement.backend, device, std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000)));
  doing = "broadcasting the parameters";
  broadcast_from_rank0(*comm, params.all);
  const Units units = o.zero == 3 ? stage3_units(params, o.model.layers) : Units{};
  Reducer reducer(*comm, params.all, params.names, static_cast<size_t>(o.bucket_mb * 1024 * 1024), !device.is_cuda(),
                  o.zero, units.buckets);
  std::unique_ptr<ShardedParameters> shards;
  if (o.zero == 3) {
    shards = std::make_unique<ShardedParameters>(*comm, reducer, params.all, units.block_buckets, units.rest_bucket);
    model->set_block_parameters(shards.get());
    set_autocast_weight_cache(false);  // a cached bf16 copy would keep every released block's weights
  }
  Optimizer optimizer{whole, nullptr};
  if (o.zero > 0) {
    optimizer.sharded = std::make_unique<ShardedAdamW>(*comm, reducer, params.all, params.decay, o.weight_decay, o.lr,
                                                       o.beta1, o.beta2, shards.get(), offload);
    if (resumed && resumed->sharding.whole()) {  // this rank's pieces of a whole checkpoint's optimizer
      optimizer.sharded->take_whole(whole, params.decay);
      whole.clear_state();
    } else if (resumed) {
      doing = "loading this rank's optimizer shard";
      load_shard(o.checkpoint_dir, progress.step, env.rank, *optimizer.sharded);
    }
  }
  std::optional<LossScaler> scaler;
  if (o.loss_scale == "dynamic" || (o.loss_scale == "auto" && o.mixed_precision == "fp16")) {
    scaler.emplace(progress.loss_scale);
  }

  if (leader) {
    say(start_line(o, env, placement, batching, reducer, *data, kernels, scaler));
    if (!device.is_cuda()) warn_about_blas();
  }
  std::ofstream metrics;
  if (leader && !o.metrics.empty()) metrics.open(o.metrics, std::ios::app);

  const LrSchedule schedule{o.lr, o.effective_min_lr(), o.effective_warmup(), o.steps};
  const long long tokens_per_step = batching.global() * o.model.context;
  const int T = o.model.context;
  at::Tensor tokens = torch::empty({o.batch_size, T + 1}, torch::kLong);
  Interval interval;
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));

  bool holdings_said = false;
  while (progress.step < o.steps) {
    const long long step = progress.step + 1;  // 1-based, as logged
    doing = "step " + std::to_string(step) + " of " + std::to_string(o.steps);
    maybe_fail(o, env, step);
    const double lr = lr_at(schedule, progress.step);
    optimizer.set_lr(lr);
    if (o.model.dropout > 0) torch::manual_seed(mix64(o.seed ^ mix64(progress.step * 4099 + env.rank)));

    for (int micro = 0; micro < o.grad_accum; ++micro) {
      auto* rows = tokens.data_ptr<int64_t>();
      for (int row = 0; row < o.batch_size; ++row) {
        data->sample(progress.position + global_row(batching, env.rank, micro, row),
                     std::span<int64_t>(rows + static_cast<size_t>(row) * (T + 1), T + 1));
      }
      // To a GPU from pinned memory, asynchronously: a pageable copy would stall the CPU every micro-batch.
      at::Tensor batch = device.is_cuda() ? tokens.pin_memory().to(device, /*non_blocking=*/true) : tokens;
      reducer.prepare(micro == o.grad_accum - 1);
      if (shards) shards->before_forward();
      at::Tensor loss;
      {
        Autocast on(autocast, device);
        loss = model->loss(batch);
      }
      if (o.grad_accum > 1) loss = loss / o.grad_accum;
      at::Tensor scaled = scaler ? loss * scaler->scale() : loss;
      if (micro == 0 && injects(o, env, step, "nonfinite")) scaled = scaled * std::numeric_limits<double>::infinity();
      scaled.backward();
      reducer.end_micro_batch();
      if (shards) shards->after_backward();
      loss_sum += loss.detach();
    }
    const double scale = scaler ? scaler->scale() : 1.0;
    const at::Tensor grad_norm = reducer.finish(o.grad_clip, scale);
    if (scaler && !scaler->update(std::isfinite(grad_norm.item<double>()))) {
      if (leader) {
        say("dtl-train: step " + std::to_string(step) + ": gradients not finite at loss scale " + c10::str(scale) +
            ": the step is skipped and the scale is now " + c10::str(scaler->scale()));
      }
    } else {
      optimizer.step(reducer.clip_scale());
      if (leader && !holdings_said) {  // after the first step taken: AdamW makes its state then
        const size_t held = optimizer.sharded ? optimizer.sharded->parameter_bytes() : parameter_bytes(params.all);
        say(memory_line(o, reducer, held, optimizer.state_bytes(), optimizer.state_on_host()));
        holdings_said = true;
      }
    }
    reducer.zero_grad();
    progress.step = step;
    progress.position += batching.global();
    if (scaler) progress.loss_scale = scaler->state();
    interval.add(reducer);

    if (step % o.log_every == 0 || step == o.steps) {
      const double loss_mean = allreduce_mean(*comm, loss_sum) / static_cast<double>(interval.steps());
      loss_sum.zero_();
      StepRecord r = interval.close(o, env, step, tokens_per_step, reducer.measures_overlap());
      r.loss = loss_mean;
      r.lr = lr;
      r.grad_norm = grad_norm.item<double>();
      if (leader) {
        say(log_line(r));
        if (metrics.is_open()) metrics << metrics_json(r) << "\n" << std::flush;
      }
    }
    if (!checkpoint.empty() && (leader || optimizer.sharded) && (step % o.checkpoint_every == 0 || step == o.steps)) {
      doing = "saving " + checkpoint + " at step " + std::to_string(step);
      interval.exclude([&] {  // not part of the steps' time
        if (shards) shards->gather_all();
        if (optimizer.sharded) {
          save_sharded(o.checkpoint_dir, checkpoint, model, *optimizer.sharded, progress, sharding, *comm);
        } else {
          save_checkpoint(checkpoint, model, &whole, progress, sharding);
        }
        if (shards) shards->release_all();
      });
    }
  }

  if (!o.dump_params.empty()) {
    doing = "writing the parameters to " + o.dump_params;
    if (shards) shards->gather_all();
    dump_parameters(o.dump_params, env.rank, model);
  }
  if (leader) {
    if (auto peak = peak_device_bytes(device)) {
      say("dtl-train: rank 0's peak device memory: " + std::to_string(*peak) + " bytes allocated");
    }
    say("dtl-train: done at step " + std::to_string(progress.step));
  }
  return 0;
}

/// The report of a rank that failed: what it was doing, then the exception as torchrun shows it.
/// A rank that failed only because a peer's connection closed (the peer died first) lingers a
/// moment before exiting, so that the launcher observes the dead peer, the root cause, first.
[[noreturn]] void fail(const LaunchEnv& env, const std::string& doing, const std::string& type,
                       const std::string& message) {
  const std::string text =
      "dtl-train rank " + std::to_string(env.rank) + " failed while " + doing + ":\n" + type + ": " + message;
  const bool peer_gone = message.find("by peer") != std::string::npos;
  exit_with_report(env.error_file, {type, message, text}, text, 1,
                   peer_gone ? std::chrono::seconds(2) : std::chrono::seconds(0));
}

}  // namespace

int run_consolidation(const TrainOptions& o) {
  const std::string& dir = o.consolidate.at(0);
  try {
    say(consolidate(o.model, dir, o.consolidate.at(1)));
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "dtl-train: error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "dtl-train: error: --consolidate " << dir << ": " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "dtl-train: error: --consolidate " << dir << ": " << e.what() << "\n";
  }
  return 1;
}

int run_training(const TrainOptions& o, const LaunchEnv& env) {
  std::string doing = "starting";
  std::unique_ptr<Comm> comm;  // outlives the handlers below: a failing rank reports before its sockets close
  try {
    return train(o, env, doing, comm);
  } catch (const UsageError& e) {
    const std::string line = std::string("dtl-train: error: ") + e.what();
    exit_with_report(env.error_file, {"UsageError", e.what(), line}, line, 2);
  } catch (const c10::Error& e) {
    fail(env, doing, type_name(e), e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail(env, doing, type_name(e), e.what());
  }
}

}  // namespace dtl::train
