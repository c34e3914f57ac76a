#include "train.h"

#include <time.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "atomic_file.h"
#include "autocast.h"
#include "blas.h"
#include "comm.h"
#include "data.h"
#include "fused_ops.h"
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

/// The model shape as stored in checkpoints: resuming another shape is an error, not garbage.
std::string shape_text(const ModelShape& s) {
  std::ostringstream o;
  o << "layers=" << s.layers << " width=" << s.width << " heads=" << s.heads << " context=" << s.context
    << " vocab=" << s.vocab;
  return o.str();
}

struct Placement {
  c10::Device device = c10::kCPU;
  std::string backend;
};

Placement place(const TrainOptions& o, const LaunchEnv& env) {
  const bool cuda = torch::cuda::is_available();
  if (o.device == "cuda" && !cuda) throw UsageError("--device cuda but no CUDA device is usable here");
  if (o.backend == "nccl" && !built_with_nccl()) {
    throw UsageError("--backend nccl: this dtl-train was built without NCCL (scripts/build-cuda.sh builds one with it)");
  }
  if (o.backend == "nccl" && (!cuda || o.device == "cpu")) throw UsageError("--backend nccl needs a CUDA device");
  Placement p;
  if (cuda && o.device != "cpu") {
    const int count = static_cast<int>(torch::cuda::device_count());
    const int index = cuda_index_for(env.local_rank, count);
    if (index < 0) {
      throw UsageError("LOCAL_RANK=" + std::to_string(env.local_rank) + " but only " + std::to_string(count) +
                       " CUDA devices are visible (CUDA_VISIBLE_DEVICES=" + env.cuda_visible_devices.value_or("") + ")");
    }
    p.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  p.backend = o.backend != "auto" ? o.backend : (p.device.is_cuda() && built_with_nccl() ? "nccl" : "gloo");
  return p;
}

/// What the model's GELU and attention run on, for the start line: fused_ops.h's own conditions,
/// asked of an empty tensor of what they will be given (bf16 under autocast).
std::string kernels_used(const TrainOptions& o, c10::Device device) {
  const at::Tensor given =
      at::empty({0}, at::TensorOptions(device).dtype(o.mixed_precision == "bf16" ? at::kBFloat16 : at::kFloat));
  if (o.cpu_kernels != "fused" || !fused_gelu_usable(given)) return "torch's ops";
  if (o.model.dropout > 0) return "fused GELU, torch's attention (dropout)";
  if (!fused_attention_usable(given)) return "fused GELU, torch's attention (no sgemm in the process)";
  return "fused GELU and attention";
}

/// Where the run stands: what a checkpoint stores besides the model and the optimizer.
struct Progress {
  long long step = 0;      ///< optimizer steps done
  long long position = 0;  ///< global sample number of the next step's first row
};

/// How the optimizer state is kept: whole in the checkpoint (stage 0), or one file per rank.
struct Sharding {
  int zero = 0;
  int world = 1;
  std::string text() const {
    return "--zero " + std::to_string(zero) + (zero > 0 ? " on " + std::to_string(world) + " ranks" : "");
  }
};

/// The checkpoint: the model, where the run stands and, at stage 0, the optimizer (`opt`).
void save_checkpoint(const std::string& path, Gpt& model, const FusedAdamW* opt, const Progress& p,
                     const Sharding& sharding) {
  torch::serialize::OutputArchive root, m, o;
  model->save(m);
  root.write("model", m);
  if (opt) {
    opt->save(o);
    root.write("optimizer", o);
  }
  root.write("sharding", c10::IValue(sharding.text()));
  root.write("step", c10::IValue(static_cast<int64_t>(p.step)));
  root.write("position", c10::IValue(static_cast<int64_t>(p.position)));
  root.write("shape", c10::IValue(shape_text(model->shape())));
  root.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  std::ostringstream bytes;
  root.save_to(bytes);
  write_file_atomically(path, bytes.str());
}

Progress load_checkpoint(const std::string& path, Gpt& model, FusedAdamW* opt, c10::Device device,
                         const Sharding& sharding) {
  torch::serialize::InputArchive root, m, o;
  root.load_from(path, device);
  c10::IValue shape, step, position, written;
  root.read("shape", shape);
  if (shape.toStringRef() != shape_text(model->shape())) {
    throw UsageError("checkpoint " + path + " is of another model (" + shape.toStringRef() + "; this run: " +
                     shape_text(model->shape()) + ")");
  }
  const std::string was = root.try_read("sharding", written) ? written.toStringRef() : Sharding{}.text();
  if (was != sharding.text()) {
    throw UsageError("checkpoint " + path + " was written with " + was + "; this run has " + sharding.text() +
                     ": resume with the same");
  }
  root.read("model", m);
  model->load(m);
  if (opt) {
    root.read("optimizer", o);
    opt->load(o);
  }
  root.read("step", step);
  root.read("position", position);
  at::Tensor rng;
  root.read("rng", rng);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the shared state
  generator.set_state(rng.cpu());
  return {step.toInt(), position.toInt()};
}

/// A rank's ZeRO optimizer shard for a step: `DIR/zero-step<S>-rank<R>.pt`.
std::string shard_path(const std::string& dir, long long step, int rank) {
  return dir + "/zero-step" + std::to_string(step) + "-rank" + std::to_string(rank) + ".pt";
}

/// Every rank writes its shard, then (all written) rank 0 the checkpoint that names the step, then
/// each rank removes its shards of other steps. A run killed at any point resumes from a
/// checkpoint whose shards all exist.
void save_sharded(const std::string& dir, const std::string& checkpoint, Gpt& model, const ShardedAdamW& opt,
                  const Progress& p, const Sharding& sharding, Comm& comm) {
  torch::serialize::OutputArchive shard;
  opt.save(shard);
  std::ostringstream bytes;
  shard.save_to(bytes);
  write_file_atomically(shard_path(dir, p.step, comm.rank), bytes.str());
  const at::Tensor barrier = at::zeros({});
  allreduce_mean(comm, barrier);
  if (comm.rank == 0) save_checkpoint(checkpoint, model, nullptr, p, sharding);
  allreduce_mean(comm, barrier);
  const std::string mine = "-rank" + std::to_string(comm.rank) + ".pt";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("zero-step", 0) == 0 && name.ends_with(mine) &&
        entry.path() != std::filesystem::path(shard_path(dir, p.step, comm.rank))) {
      std::filesystem::remove(entry.path());
    }
  }
}

void load_shard(const std::string& dir, long long step, int rank, ShardedAdamW& opt) {
  const std::string path = shard_path(dir, step, rank);
  if (!std::filesystem::exists(path)) {
    throw UsageError("checkpoint at step " + std::to_string(step) + " has no optimizer shard " + path);
  }
  torch::serialize::InputArchive shard;
  shard.load_from(path);
  opt.load(shard);
}

size_t parameter_bytes(const std::vector<at::Tensor>& params) {
  size_t bytes = 0;
  for (const auto& p : params) bytes += p.numel() * p.element_size();
  return bytes;
}

/// What a rank holds after a step, counted from the live tensors.
std::string memory_line(const TrainOptions& o, const Reducer& reducer, size_t parameters, size_t state) {
  std::ostringstream s;
  s << "dtl-train: rank 0 holds parameters " << parameters << " bytes, gradients " << reducer.gradient_bytes()
    << " bytes, optimizer state " << state << " bytes (--zero " << o.zero << ")";
  if (reducer.reduce_scatter_emulated()) {
    s << "; the backend has no reduce_scatter: each gradient bucket is allreduced and this rank's chunk kept "
         "(data parallel's traffic, not half of it)";
  }
  return s.str();
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
void maybe_fail(const TrainOptions& o, const LaunchEnv& env, long long step) {
  if (step != o.fail_at_step || env.rank != o.fail_rank || env.restart_count != 0) return;
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

int train(const TrainOptions& o, const LaunchEnv& env, std::string& doing, std::unique_ptr<Comm>& comm) {
  // Everything a user can get wrong is checked before the first collective, on every rank.
  doing = "reading the data";
  const Batching batching{o.batch_size, o.grad_accum, env.world_size};
  auto data = open_data(o);
  if (auto problem = check_data_fits(*data, batching, o.model.context); !problem.empty()) throw UsageError(problem);
  const Placement placement = place(o, env);
  const c10::Device device = placement.device;
  const bool leader = env.rank == 0;
  const std::string checkpoint = o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/checkpoint.pt";

  doing = "building the model";
  torch::manual_seed(o.seed);
  Gpt model(o.model, o.cpu_kernels == "fused");
  model->set_activation_checkpointing(o.activation_checkpointing);
  model->to(device);
  model->train();
  std::vector<at::Tensor> decay, no_decay, params;
  std::vector<std::string> names;
  for (auto& item : model->named_parameters()) {
    const at::Tensor& p = item.value();
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
    params.push_back(p);
    names.push_back(item.key());
  }
  // torch::optim::AdamW's update (decoupled decay on matrices only), fused into one pass per parameter.
  FusedAdamW optimizer({{decay, o.weight_decay}, {no_decay, 0.0}}, o.lr, o.beta1, o.beta2, 1e-8);

  const Sharding sharding{o.zero, o.zero > 0 ? env.world_size : 1};
  Progress progress;
  bool resumed = false;
  if (!checkpoint.empty()) {
    std::filesystem::create_directories(o.checkpoint_dir);
    if (leader) remove_stale_temps(checkpoint);
    if (std::filesystem::exists(checkpoint)) {
      doing = "loading " + checkpoint;
      progress = load_checkpoint(checkpoint, model, o.zero > 0 ? nullptr : &optimizer, device, sharding);
      resumed = true;
      if (leader) say("resumed from " + checkpoint + " at step " + std::to_string(progress.step));
    }
  }

  doing = "connecting to rank 0's store at " + env.master_addr + ":" + std::to_string(env.master_port);
  comm = connect(env, placement.backend, device,
                      std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000)));
  doing = "broadcasting the parameters";
  broadcast_from_rank0(*comm, params);
  Reducer reducer(*comm, params, names, static_cast<size_t>(o.bucket_mb * 1024 * 1024), !device.is_cuda(), o.zero);
  std::unique_ptr<ShardedAdamW> sharded;
  if (o.zero > 0) {
    std::vector<bool> decay;
    for (const auto& p : params) decay.push_back(p.dim() >= 2);
    sharded = std::make_unique<ShardedAdamW>(*comm, reducer, params, decay, o.weight_decay, o.lr, o.beta1, o.beta2);
    if (resumed) {
      doing = "loading this rank's optimizer shard";
      load_shard(o.checkpoint_dir, progress.step, env.rank, *sharded);
    }
  }

  const long long tokens_per_step = batching.global() * o.model.context;
  if (leader) {
    std::ostringstream s;
    s << "dtl-train: " << env.world_size << " rank(s), " << placement.backend << " on " << device.str() << ", "
      << (parameter_count(o.model) / 1e6) << "M parameters (" << shape_text(o.model) << "), global batch "
      << batching.global() << " x " << o.model.context << " tokens, " << reducer.bucket_count()
      << " gradient buckets, " << flops_per_token(o.model) / 1e6 << " MFLOP/token, mixed precision "
      << o.mixed_precision << ", " << kernels_used(o, device) << ", data " << data->describe() << "; "
      << sourced(o, "mixed_precision", o.mixed_precision) << ", " << sourced(o, "grad_accum", std::to_string(o.grad_accum))
      << ", " << sourced(o, "grad_clip", c10::str(o.grad_clip)) << ", "
      << sourced(o, "activation_checkpointing", o.activation_checkpointing ? "on" : "off") << ", "
      << sourced(o, "zero", std::to_string(o.zero));
    say(s.str());
    if (auto blas = loaded_blas(); blas && !device.is_cuda()) {
      if (auto advice = blas_advice(*blas); !advice.empty()) say("dtl-train: warning: " + advice);
    }
    if (auto core = openblas_core(); core && !device.is_cuda()) {
      const char* coretype = std::getenv("OPENBLAS_CORETYPE");
      const auto set = coretype ? std::optional<std::string>(coretype) : std::nullopt;
      if (auto advice = openblas_core_advice(*core, cpu_has_avx512(), set); !advice.empty()) say("dtl-train: warning: " + advice);
    }
  }
  std::ofstream metrics;
  if (leader && !o.metrics.empty()) metrics.open(o.metrics, std::ios::app);

  const LrSchedule schedule{o.lr, o.effective_min_lr(), o.effective_warmup(), o.steps};
  const bool bf16 = o.mixed_precision == "bf16";
  const int T = o.model.context;
  at::Tensor tokens = torch::empty({o.batch_size, T + 1}, torch::kLong);
  auto interval_start = Clock::now();
  double interval_cpu_start = process_cpu_seconds();
  double interval_wait = 0, interval_busy = 0, interval_exposed = 0;
  long long interval_steps = 0;
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  at::Tensor grad_norm;

  const long long first_step = progress.step;
  while (progress.step < o.steps) {
    const long long step = progress.step + 1;  // 1-based, as logged
    doing = "step " + std::to_string(step) + " of " + std::to_string(o.steps);
    maybe_fail(o, env, step);
    const double lr = lr_at(schedule, progress.step);
    if (sharded) {
      sharded->set_lr(lr);
    } else {
      optimizer.set_lr(lr);
    }
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
      at::Tensor loss;
      {
        Autocast autocast(bf16, device);
        loss = model->loss(batch);
      }
      if (o.grad_accum > 1) loss = loss / o.grad_accum;
      loss.backward();
      reducer.end_micro_batch();
      loss_sum += loss.detach();
    }
    grad_norm = reducer.finish(o.grad_clip);
    if (sharded) {
      sharded->step(reducer.clip_scale());
    } else {
      optimizer.step(reducer.clip_scale());
    }
    if (leader && progress.step == first_step) {
      say(memory_line(o, reducer, sharded ? sharded->parameter_bytes() : parameter_bytes(params),
                      sharded ? sharded->state_bytes() : optimizer.state_bytes()));
    }
    reducer.zero_grad();
    progress.step = step;
    progress.position += batching.global();
    interval_steps++;
    interval_wait += reducer.last_wait_s();
    interval_busy += reducer.last_timing().busy;
    interval_exposed += reducer.last_timing().exposed;

    if (step % o.log_every == 0 || step == o.steps) {
      const double loss_mean = allreduce_mean(*comm, loss_sum) / static_cast<double>(interval_steps);
      loss_sum.zero_();
      const double elapsed = seconds_since(interval_start);
      StepRecord r;
      r.step = step;
      r.steps = o.steps;
      r.loss = loss_mean;
      r.lr = lr;
      r.grad_norm = grad_norm.item<double>();
      r.step_time_s = elapsed / interval_steps;
      r.cpu_time_s = (process_cpu_seconds() - interval_cpu_start) / interval_steps;
      r.tokens_per_s = tokens_per_step * interval_steps / elapsed;
      r.comm_wait_share = interval_wait / elapsed;
      r.comm_hidden_share = !reducer.measures_overlap() ? std::nan("")
                            : interval_busy > 0     ? 1.0 - interval_exposed / interval_busy
                                                    : 1.0;
      if (o.peak_tflops > 0) {
        r.mfu = r.tokens_per_s / env.world_size * flops_per_token(o.model) / (o.peak_tflops * 1e12);
      }
      r.tokens = step * tokens_per_step;
      r.world_size = env.world_size;
      if (leader) {
        say(log_line(r));
        if (metrics.is_open()) metrics << metrics_json(r) << "\n" << std::flush;
      }
      interval_steps = 0;
      interval_wait = interval_busy = interval_exposed = 0;
      interval_start = Clock::now();
      interval_cpu_start = process_cpu_seconds();
    }
    if (!checkpoint.empty() && (leader || sharded) && (step % o.checkpoint_every == 0 || step == o.steps)) {
      doing = "saving " + checkpoint + " at step " + std::to_string(step);
      const auto saving = Clock::now();
      const double saving_cpu = process_cpu_seconds();
      if (sharded) {
        save_sharded(o.checkpoint_dir, checkpoint, model, *sharded, progress, sharding, *comm);
      } else {
        save_checkpoint(checkpoint, model, &optimizer, progress, sharding);
      }
      interval_start += Clock::now() - saving;  // not part of the steps' time
      interval_cpu_start += process_cpu_seconds() - saving_cpu;
    }
  }

  if (!o.dump_params.empty()) {
    doing = "writing the parameters to " + o.dump_params;
    dump_parameters(o.dump_params, env.rank, model);
  }
  if (leader) say("dtl-train: done at step " + std::to_string(progress.step));
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
  exit_with_report(env.error_file, {type, message, text}, text, 1, peer_gone ? std::chrono::seconds(2) : std::chrono::seconds(0));
}

}  // namespace

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
