#include "checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <ATen/Functions.h>
#include <torch/serialize.h>

#include "atomic_file.h"
#include "comm.h"
#include "optim.h"
#include "report.h"
#include "zero.h"

namespace dtl::train {
namespace {

/// A rank's ZeRO optimizer shard for a step: `DIR/zero-step<S>-rank<R>.pt`.
std::string shard_path(const std::string& dir, long long step, int rank) {
  return dir + "/zero-step" + std::to_string(step) + "-rank" + std::to_string(rank) + ".pt";
}

/// Sharding::text() read back; std::nullopt for anything else.
std::optional<Sharding> parse_sharding(const std::string& text) {
  Sharding s;
  char rest = 0;
  if (std::sscanf(text.c_str(), "--zero %d on %d ranks%c", &s.zero, &s.world, &rest) == 2 && s.zero > 0 &&
      s.world > 0) {
    return s;
  }
  if (text == Sharding{}.text()) return Sharding{};
  return std::nullopt;
}

}  // namespace

std::string Sharding::text() const {
  return "--zero " + std::to_string(zero) + (zero > 0 ? " on " + std::to_string(world) + " ranks" : "");
}

std::string shape_text(const ModelShape& s) {
  std::ostringstream o;
  o << "layers=" << s.layers << " width=" << s.width << " heads=" << s.heads << " context=" << s.context
    << " vocab=" << s.vocab;
  return o.str();
}

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
  root.write("loss_scale", c10::IValue(p.loss_scale.scale));
  root.write("loss_scale_clean_steps", c10::IValue(static_cast<int64_t>(p.loss_scale.clean_steps)));
  root.write("shape", c10::IValue(shape_text(model->shape())));
  root.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  std::ostringstream bytes;
  root.save_to(bytes);
  write_file_atomically(path, bytes.str());
}

Loaded load_checkpoint(const std::string& path, Gpt& model, FusedAdamW& whole, c10::Device device,
                       const Sharding* expected) {
  torch::serialize::InputArchive root, m, o;
  root.load_from(path, c10::kCPU);  // the optimizer's state goes where `whole` keeps it, not all to `device`
  c10::IValue shape, step, position, written;
  root.read("shape", shape);
  if (shape.toStringRef() != shape_text(model->shape())) {
    throw UsageError("checkpoint " + path + " is of another model (" + shape.toStringRef() +
                     "; this run: " + shape_text(model->shape()) + ")");
  }
  const std::string was = root.try_read("sharding", written) ? written.toStringRef() : Sharding{}.text();
  const auto sharding = parse_sharding(was);
  if (!sharding) throw UsageError("checkpoint " + path + " names an unknown sharding '" + was + "'");
  if (!sharding->whole() && expected && was != expected->text()) {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    throw UsageError("checkpoint " + path + " was written with " + was + "; this run has " + expected->text() +
                     ": resume with the same, or make it whole first (dtl-train --consolidate " + dir + " OUT)");
  }
  root.read("model", m);
  model->load(m);     // the parameters now hold the archive's CPU tensors ...
  model->to(device);  // ... and go back to the device, each keeping its identity
  if (sharding->whole()) {
    root.read("optimizer", o);
    whole.load(o);
  }
  root.read("step", step);
  root.read("position", position);
  Progress progress;
  progress.step = step.toInt();
  progress.position = position.toInt();
  c10::IValue scale, clean_steps;
  if (root.try_read("loss_scale", scale) && root.try_read("loss_scale_clean_steps", clean_steps)) {
    progress.loss_scale = {scale.toDouble(), clean_steps.toInt()};
  }
  at::Tensor rng;
  root.read("rng", rng);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the shared state
  generator.set_state(rng.cpu());
  return {progress, *sharding};
}

void save_sharded(const std::string& dir, const std::string& checkpoint, Gpt& model, const ShardedAdamW& opt,
                  const Progress& p, const Sharding& sharding, Comm& comm) {
  torch::serialize::OutputArchive shard;
  opt.save(shard);
  std::ostringstream bytes;
  shard.save_to(bytes);
  write_file_atomically(shard_path(dir, p.step, comm.rank), bytes.str());
  const at::Tensor barrier = at::zeros({}, model->parameters().front().options());  // NCCL's on the device
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
  shard.load_from(path, c10::kCPU);  // the moments then go where this rank keeps them (its device, or the host)
  try {
    opt.load(shard);
  } catch (const std::invalid_argument& e) {
    throw UsageError("optimizer shard " + path + " " + e.what() + ": resume with the same, or make the checkpoint " +
                     "whole first (dtl-train --consolidate " + dir + " OUT)");
  }
}

std::string consolidate(const ModelShape& shape, const std::string& dir, const std::string& out) {
  namespace fs = std::filesystem;
  const std::string path = dir + "/checkpoint.pt";
  if (!fs::exists(path)) throw UsageError("--consolidate: " + path + " does not exist");
  if (fs::weakly_canonical(dir) == fs::weakly_canonical(out)) {
    throw UsageError("--consolidate: OUT must be another directory than " + dir);
  }
  Gpt model(shape);
  const Parameters params = parameters_of(model);
  FusedAdamW whole({{params.with_decay(true)}, {params.with_decay(false)}}, 0, 0, 0);
  const Loaded loaded = load_checkpoint(path, model, whole, c10::kCPU, nullptr);  // the model, the step, RNG
  const Sharding& sharding = loaded.sharding;
  const std::string text = sharding.text();
  if (sharding.whole()) {
    throw UsageError("--consolidate: " + path + " is whole already (" + text +
                     "): a run of any stage and world size can start from it");
  }
  const long long step = loaded.progress.step;

  // Every parameter's moments, joined from the ranks' pieces; each element must come exactly once.
  const size_t n = params.all.size();
  std::vector<at::Tensor> exp_avg(n), exp_avg_sq(n), covered(n);
  std::vector<int64_t> steps(n, -1);
  for (size_t i = 0; i < n; ++i) {
    exp_avg[i] = at::zeros({params.all[i].numel()});
    exp_avg_sq[i] = at::zeros({params.all[i].numel()});
    covered[i] = at::zeros({params.all[i].numel()}, at::kBool);
  }
  for (int rank = 0; rank < sharding.world; ++rank) {
    const std::string file = shard_path(dir, step, rank);
    if (!fs::exists(file)) {
      throw UsageError("--consolidate: " + path + " is step " + std::to_string(step) + " of " + text + ", but rank " +
                       std::to_string(rank) + "'s shard " + file + " is missing");
    }
    torch::serialize::InputArchive archive;
    archive.load_from(file, c10::kCPU);
    ShardedAdamW::Shard shard;
    try {
      shard = ShardedAdamW::read(archive);
    } catch (const std::exception& e) {
      throw UsageError("--consolidate: " + file + ": " + e.what());
    }
    if (shard.world != sharding.world || shard.rank != rank) {
      throw UsageError("--consolidate: " + file + " is rank " + std::to_string(shard.rank) + "'s of " +
                       std::to_string(shard.world) + ", not rank " + std::to_string(rank) + "'s of " +
                       std::to_string(sharding.world));
    }
    for (size_t g = 0; g < shard.pieces.size(); ++g) {
      for (size_t k = 0; k < shard.pieces[g].size(); ++k) {
        const ShardedAdamW::Piece& w = shard.pieces[g][k];
        const FusedAdamW::State& st = shard.state[g][k];
        if (w.param < 0 || static_cast<size_t>(w.param) >= n || w.offset < 0 || w.length < 0 ||
            w.offset + w.length > params.all[w.param].numel() || (params.decay[w.param] ? 0u : 1u) != g) {
          throw UsageError("--consolidate: " + file + " holds a piece that is not of this model (" + shape_text(shape) +
                           ")");
        }
        if (st.step > 0) {
          exp_avg[w.param].narrow(0, w.offset, w.length).copy_(st.exp_avg.reshape({-1}));
          exp_avg_sq[w.param].narrow(0, w.offset, w.length).copy_(st.exp_avg_sq.reshape({-1}));
        }
        at::Tensor seen = covered[w.param].narrow(0, w.offset, w.length);
        if (seen.any().item<bool>()) {
          throw UsageError("--consolidate: " + file + " holds elements of " + params.names[w.param] +
                           " that another piece holds too");
        }
        seen.fill_(true);
        steps[w.param] = std::max(steps[w.param], st.step);
      }
    }
  }
  size_t index_in_group[2] = {0, 0};
  for (size_t i = 0; i < n; ++i) {
    if (const int64_t held = covered[i].sum().item<int64_t>(); held != params.all[i].numel()) {
      throw UsageError("--consolidate: the shards of step " + std::to_string(step) + " hold " + std::to_string(held) +
                       " of the " + std::to_string(params.all[i].numel()) + " elements of " + params.names[i]);
    }
    const size_t g = params.decay[i] ? 0 : 1;
    whole.set_state(g, index_in_group[g]++, std::max<int64_t>(steps[i], 0), exp_avg[i], exp_avg_sq[i]);
  }
  fs::create_directories(out);
  const std::string target = out + "/checkpoint.pt";
  save_checkpoint(target, model, &whole, loaded.progress, Sharding{});
  return "dtl-train: " + path + " (step " + std::to_string(step) + ", " + text + ") made whole in " + target +
         ": a run of any stage and world size can start from it";
}

}  // namespace dtl::train
