#include "zero.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include <ATen/Functions.h>
#include <torch/serialize/archive.h>

namespace dtl::train {

namespace {

/// Bucket `b`'s parameters laid out as the reducer lays out their gradients, padding zeroed.
at::Tensor bucket_flat(const Reducer& reducer, size_t b, const std::vector<at::Tensor>& params) {
  at::Tensor flat = at::zeros({reducer.padded_size(b)}, params[reducer.bucket_params(b).front()].options());
  for (size_t i : reducer.bucket_params(b)) {
    flat.narrow(0, reducer.offset_of(i), reducer.numel_of(i)).copy_(params[i].detach().reshape({-1}));
  }
  return flat;
}

/// The shard's table of where each piece lies, per group; std::nullopt when it has none.
std::optional<std::vector<std::vector<ShardedAdamW::Piece>>> read_pieces(torch::serialize::InputArchive& archive) {
  std::vector<std::vector<ShardedAdamW::Piece>> out(2);
  for (size_t g = 0; g < out.size(); ++g) {
    at::Tensor table;
    if (!archive.try_read("pieces." + std::to_string(g), table, /*is_buffer=*/true)) return std::nullopt;
    const auto rows = table.accessor<int64_t, 2>();
    for (int64_t k = 0; k < table.size(0); ++k) out[g].push_back({rows[k][0], rows[k][1], rows[k][2]});
  }
  return out;
}

}  // namespace

ShardedParameters::ShardedParameters(Comm& comm, const Reducer& reducer, std::vector<at::Tensor> params,
                                     std::vector<size_t> block_buckets, size_t rest_bucket)
    : comm_(comm),
      reducer_(reducer),
      params_(std::move(params)),
      units_(reducer.bucket_count()),
      block_buckets_(std::move(block_buckets)),
      rest_bucket_(rest_bucket) {
  at::NoGradGuard no_grad;
  for (const auto& p : params_) shapes_.push_back(p.sizes().vec());
  for (size_t b = 0; b < units_.size(); ++b) {
    const int64_t chunk = reducer.padded_size(b) / comm.world;
    units_[b].chunk = bucket_flat(reducer, b, params_).narrow(0, comm.rank * chunk, chunk).clone();
    units_[b].placed = true;  // the parameters hold their own data until released below
  }
  release_all();
}

void ShardedParameters::start(size_t b) {
  Unit& u = units_[b];
  if (u.placed || u.work) return;
  u.full = at::empty({reducer_.padded_size(b)}, u.chunk.options());
  std::vector<std::vector<at::Tensor>> out{u.full.chunk(comm_.world)};
  std::vector<at::Tensor> in{u.chunk};
  u.work = comm_.pg->allgather(out, in);
}

void ShardedParameters::place(size_t b) {
  Unit& u = units_[b];
  if (u.placed) return;
  start(b);
  u.work->wait();
  u.work.reset();
  at::NoGradGuard no_grad;
  for (size_t i : reducer_.bucket_params(b)) {
    at::Tensor p = params_[i];
    p.set_data(u.full.narrow(0, reducer_.offset_of(i), reducer_.numel_of(i)).view(shapes_[i]));
  }
  u.placed = true;
}

void ShardedParameters::drop(size_t b) {
  Unit& u = units_[b];
  if (!u.placed) return;
  for (size_t i : reducer_.bucket_params(b)) {
    at::Tensor p = params_[i];
    p.set_data(at::empty({0}, u.chunk.options()));
  }
  u.full = at::Tensor();
  u.placed = false;
}

void ShardedParameters::gather(int block, int next) {
  const size_t b = block_buckets_.at(block);
  start(b);
  if (next >= 0) start(block_buckets_.at(next));  // while this block runs
  place(b);
}

void ShardedParameters::release(int block) { drop(block_buckets_.at(block)); }

void ShardedParameters::gather_all() {
  for (size_t b = 0; b < units_.size(); ++b) start(b);
  for (size_t b = 0; b < units_.size(); ++b) place(b);
}

void ShardedParameters::release_all() {
  for (size_t b = 0; b < units_.size(); ++b) drop(b);
}

size_t ShardedParameters::bytes() const {
  size_t bytes = 0;
  for (const Unit& u : units_) {
    for (const at::Tensor* t : {&u.chunk, &u.full}) {
      if (t->defined()) bytes += t->numel() * t->element_size();
    }
  }
  return bytes;
}

/// The flat buffers, and this rank's pieces of each parameter with their gradients (views into
/// the reducer's chunks, or with offload into their host copies) in the decayed and the undecayed
/// group.
ShardedAdamW::Pieces ShardedAdamW::cut(const Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
                                       const std::vector<bool>& decay, double weight_decay,
                                       const ShardedParameters* stage3, bool offload) {
  at::NoGradGuard no_grad;
  Pieces out;
  out.groups = {{{}, weight_decay}, {{}, 0.0}};
  out.where.resize(2);
  for (size_t b = 0; b < reducer.bucket_count(); ++b) {
    const int64_t padded = reducer.padded_size(b), chunk = padded / comm.world;
    const int64_t begin = comm.rank * chunk, end = begin + chunk;
    const at::Tensor flat = stage3 ? at::Tensor() : bucket_flat(reducer, b, params);
    Offloaded o{stage3 ? stage3->chunk(b) : flat.narrow(0, begin, chunk), reducer.owned_grad(b), {}, {}};
    if (offload) {
      const auto host = at::TensorOptions().dtype(at::kFloat).pinned_memory(o.device_chunk.is_cuda());
      o.host_chunk = at::empty({chunk}, host).copy_(o.device_chunk);
      o.host_grad = at::zeros({chunk}, host);
    }
    const at::Tensor& stepped = offload ? o.host_chunk : o.device_chunk;
    const at::Tensor& grad = offload ? o.host_grad : o.device_grad;
    for (size_t i : reducer.bucket_params(b)) {
      const int64_t offset = reducer.offset_of(i), n = reducer.numel_of(i);
      const int64_t from = std::max(offset, begin), to = std::min(offset + n, end);
      if (from < to) {
        at::Tensor piece = stepped.narrow(0, from - begin, to - from);
        piece.mutable_grad() = grad.narrow(0, from - begin, to - from);
        out.groups[decay[i] ? 0 : 1].params.push_back(piece);
        out.where[decay[i] ? 0 : 1].push_back({static_cast<int64_t>(i), from - offset, to - from});
      }
    }
    if (offload) out.offload.push_back(std::move(o));
    if (stage3) continue;
    for (size_t i : reducer.bucket_params(b)) {
      // The parameter keeps its autograd identity (and the reducer's hook); its data is the buffer's.
      at::Tensor p = params[i];
      p.set_data(flat.narrow(0, reducer.offset_of(i), p.numel()).view_as(p));
    }
    out.flat.push_back(flat);
  }
  return out;
}

ShardedAdamW::ShardedAdamW(Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
                           const std::vector<bool>& decay, double weight_decay, double lr, double beta1, double beta2,
                           const ShardedParameters* stage3, bool offload)
    : ShardedAdamW(comm, cut(comm, reducer, params, decay, weight_decay, stage3, offload), lr, beta1, beta2, stage3) {}

ShardedAdamW::ShardedAdamW(Comm& comm, Pieces pieces, double lr, double beta1, double beta2,
                           const ShardedParameters* stage3)
    : comm_(comm),
      stage3_(stage3),
      flat_(std::move(pieces.flat)),
      offload_(std::move(pieces.offload)),
      where_(std::move(pieces.where)),
      adamw_(std::move(pieces.groups), lr, beta1, beta2, 1e-8) {}

void ShardedAdamW::step(const at::Tensor& grad_scale) {
  at::NoGradGuard no_grad;
  if (offloaded()) {
    // A copy from the device to pageable or pinned host memory returns once the data is there.
    for (Offloaded& o : offload_) o.host_grad.copy_(o.device_grad);
    adamw_.step(grad_scale.defined() ? grad_scale.to(at::kCPU) : grad_scale);
    // From pinned memory the copies to the device run behind the host; the host writes these
    // chunks again only in the next step, after that step's copies from the device (same stream).
    for (Offloaded& o : offload_) o.device_chunk.copy_(o.host_chunk, /*non_blocking=*/true);
  } else {
    adamw_.step(grad_scale);
  }
  if (stage3_) return;  // each bucket is gathered when it is next used
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& flat : flat_) {
    std::vector<std::vector<at::Tensor>> out{flat.chunk(comm_.world)};
    std::vector<at::Tensor> in{out[0][comm_.rank].clone()};
    works.push_back(comm_.pg->allgather(out, in));
  }
  for (auto& w : works) w->wait();
}

size_t ShardedAdamW::state_bytes() const { return adamw_.state_bytes(); }

size_t ShardedAdamW::parameter_bytes() const {
  if (stage3_) return stage3_->bytes();
  size_t bytes = 0;
  for (const auto& f : flat_) bytes += f.numel() * f.element_size();
  return bytes;
}

void ShardedAdamW::save(torch::serialize::OutputArchive& archive) const {
  archive.write("world", c10::IValue(static_cast<int64_t>(comm_.world)));
  archive.write("rank", c10::IValue(static_cast<int64_t>(comm_.rank)));
  for (size_t g = 0; g < where_.size(); ++g) {
    at::Tensor table = at::empty({static_cast<int64_t>(where_[g].size()), 3}, at::kLong);
    auto rows = table.accessor<int64_t, 2>();
    for (size_t k = 0; k < where_[g].size(); ++k) {
      const Piece& w = where_[g][k];
      rows[k][0] = w.param;
      rows[k][1] = w.offset;
      rows[k][2] = w.length;
    }
    archive.write("pieces." + std::to_string(g), table, /*is_buffer=*/true);
  }
  adamw_.save(archive);
}

void ShardedAdamW::load(torch::serialize::InputArchive& archive) {
  c10::IValue world, rank;
  archive.read("world", world);
  archive.read("rank", rank);
  if (world.toInt() != comm_.world || rank.toInt() != comm_.rank) {
    throw std::invalid_argument("is rank " + std::to_string(rank.toInt()) + "'s of " + std::to_string(world.toInt()) +
                                ", not rank " + std::to_string(comm_.rank) + "'s of " + std::to_string(comm_.world));
  }
  if (read_pieces(archive) != where_) {  // the same pieces: the same buckets (--bucket_mb) and stage
    throw std::invalid_argument("was cut into other pieces (another --bucket_mb, or another stage)");
  }
  adamw_.load(archive);
}

ShardedAdamW::Shard ShardedAdamW::read(torch::serialize::InputArchive& archive) {
  Shard out;
  c10::IValue world, rank;
  archive.read("world", world);
  archive.read("rank", rank);
  out.world = static_cast<int>(world.toInt());
  out.rank = static_cast<int>(rank.toInt());
  auto pieces = read_pieces(archive);
  if (!pieces)
    throw std::runtime_error("the shard does not say where its pieces lie: it was written by an older dtl-train");
  out.pieces = std::move(*pieces);
  // An optimizer over stand-ins of the pieces' sizes reads their state as load does.
  std::vector<FusedAdamW::Group> groups(out.pieces.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Piece& w : out.pieces[g]) groups[g].params.push_back(at::empty({w.length}));
  }
  FusedAdamW stand_in(groups, 0, 0, 0);
  stand_in.load(archive);
  for (size_t g = 0; g < groups.size(); ++g) {
    auto& states = out.state.emplace_back();
    for (size_t k = 0; k < groups[g].params.size(); ++k) states.push_back(stand_in.state(g, k));
  }
  return out;
}

void ShardedAdamW::take_whole(const FusedAdamW& whole, const std::vector<bool>& decay) {
  std::vector<size_t> index_in_group(decay.size());  // a parameter's index in the whole optimizer's group
  size_t counts[2] = {0, 0};
  for (size_t i = 0; i < decay.size(); ++i) index_in_group[i] = counts[decay[i] ? 0 : 1]++;
  at::NoGradGuard no_grad;
  for (size_t g = 0; g < where_.size(); ++g) {
    for (size_t k = 0; k < where_[g].size(); ++k) {
      const Piece& w = where_[g][k];
      const FusedAdamW::State& st = whole.state(decay[w.param] ? 0 : 1, index_in_group[w.param]);
      if (st.step == 0) continue;
      adamw_.set_state(g, k, st.step, st.exp_avg.reshape({-1}).narrow(0, w.offset, w.length),
                       st.exp_avg_sq.reshape({-1}).narrow(0, w.offset, w.length));
    }
  }
}

}  // namespace dtl::train
