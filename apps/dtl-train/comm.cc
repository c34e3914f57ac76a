#include "comm.h"

#include <thread>

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// The pip wheel's libtorch has Gloo inside but ships no Gloo headers, which ProcessGroupGloo.hpp
// includes: a build against it without them (no libgloo-dev) is NCCL-only.
#if __has_include(<gloo/algorithm.h>)
#define DTL_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(DTL_WITH_NCCL) && defined(USE_C10D_NCCL)
#define DTL_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "report.h"

namespace dtl::train {

bool built_with_nccl() {
#ifdef DTL_NCCL
  return true;
#else
  return false;
#endif
}

Comm::~Comm() {
#if defined(DTL_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2))
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg.get())) {
    try {
      nccl->shutdown();
    } catch (...) {
    }
  }
#endif
}

std::unique_ptr<Comm> connect(const LaunchEnv& env, const std::string& backend, c10::Device device,
                              std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> store;
  if (env.master_port == 0) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions so;  // fields one by one: the constructor overloads differ across versions
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0 && !env.agent_store;  // as torch's env:// rendezvous decides
    so.numWorkers = env.world_size;
    so.waitWorkers = true;
    so.timeout = timeout;
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  }
  return form_group(std::move(store), env, backend, device, timeout);
}

std::unique_ptr<Comm> form_group(c10::intrusive_ptr<c10d::Store> store, const LaunchEnv& env,
                                 const std::string& backend, c10::Device device, std::chrono::milliseconds timeout) {
  auto comm = std::make_unique<Comm>();
  comm->rank = env.rank;
  comm->world = env.world_size;
  comm->backend = backend;
  comm->store = std::move(store);
  comm->store->setTimeout(timeout);

  if (backend == "gloo") {
#ifndef DTL_GLOO
    throw UsageError("--backend gloo: this dtl-train was built without Gloo's headers (install libgloo-dev and build again)");
#else
    auto o = c10d::ProcessGroupGloo::Options::create(timeout);
    for (const auto& name : env.gloo_ifnames) {  // libtorch's C++ API does not read GLOO_SOCKET_IFNAME itself
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
    if (o->devices.empty()) o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    comm->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(comm->store, env.rank, env.world_size, o);
    return comm;
#endif
  }
#ifdef DTL_NCCL
  // NCCL creates its communicators on the current device: bind it before the first collective.
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  comm->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(comm->store, env.rank, env.world_size, o);
  return comm;
#else
  (void)device;
  throw UsageError("--backend " + backend + ": this dtl-train was built without NCCL (scripts/build-cuda.sh builds one with it)");
#endif
}

void broadcast_from_rank0(Comm& comm, const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape({-1}));
  std::vector<at::Tensor> flat{at::cat(flat_parts)};
  c10d::BroadcastOptions o;
  o.rootRank = 0;
  comm.pg->broadcast(flat, o)->wait();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

double allreduce_mean(Comm& comm, const at::Tensor& scalar) {
  std::vector<at::Tensor> t{scalar.detach().to(at::kDouble).reshape({1}).clone()};
  comm.pg->allreduce(t)->wait();
  return t[0].item<double>() / comm.world;
}

Reducer::Reducer(Comm& comm, std::vector<at::Tensor> params, std::vector<std::string> names, size_t bucket_bytes,
                 bool measure_overlap, int zero_stage, const std::vector<std::vector<size_t>>& buckets)
    : comm_(comm), params_(std::move(params)), names_(std::move(names)), measure_overlap_(measure_overlap),
      zero_stage_(zero_stage) {
  slots_.resize(params_.size());
  seen_.resize(params_.size());
  options_ = params_.front().options();
  if (!buckets.empty()) {
    for (const auto& given : buckets) {
      buckets_.emplace_back().params = given;
      for (size_t i : given) slots_[i].bucket = buckets_.size() - 1;
    }
  } else {
    // Like DDP, the first bucket is small (1 MB) so that communication starts early in backward.
    size_t bytes = 0, cap = std::min<size_t>(bucket_bytes, 1 << 20);
    for (size_t i = params_.size(); i-- > 0;) {
      const size_t size = params_[i].numel() * params_[i].element_size();
      if (buckets_.empty() || (bytes > 0 && bytes + size > cap)) {
        if (!buckets_.empty()) cap = bucket_bytes;
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().params.push_back(i);
      slots_[i].bucket = buckets_.size() - 1;
      bytes += size;
    }
  }
  for (auto& b : buckets_) {
    int64_t n = 0;
    for (size_t i : b.params) {
      slots_[i].offset = n;
      slots_[i].numel = params_[i].numel();
      n += params_[i].numel();
    }
    b.padded = zero_stage_ > 0 ? (n + comm_.world - 1) / comm_.world * comm_.world : n;
    if (zero_stage_ >= 2) {
      b.owned = at::zeros({b.padded / comm_.world}, options_);
    } else {
      b.buffer = at::zeros({b.padded}, options_);
    }
  }
  world_ = at::scalar_tensor(static_cast<double>(comm_.world), at::kDouble);  // x / world, as div_(world) rounds
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_grad(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));  // the tensor holds it weakly; the hook dies with it
  }
}

double Reducer::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

void Reducer::prepare(bool sync) {
  sync_ = sync || zero_stage_ >= 2;
  if (!sync_) return;
  next_launch_ = 0;
  std::fill(seen_.begin(), seen_.end(), 0);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.end.store(0);
    b.has_callback = false;
  }
}

void Reducer::on_grad(size_t index) {
  if (!sync_ || seen_[index]) return;
  seen_[index] = 1;
  const Slot& s = slots_[index];
  Bucket& b = buckets_[s.bucket];
  auto& p = params_[index];
  if (!b.buffer.defined()) b.buffer = at::zeros({b.padded}, options_);  // stage 2: freed after each backward
  at::Tensor slot = b.buffer.narrow(0, s.offset, s.numel).view_as(p.grad());
  if (comm_.world > 1) {
    at::div_out(slot, p.grad(), world_);  // Gloo has no AVG: divide while copying, then SUM
  } else {
    slot.copy_(p.grad());
  }
  if (zero_stage_ >= 2) p.mutable_grad().reset();  // its copy is in the bucket
  if (--b.pending > 0) return;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void Reducer::launch(Bucket& b) {
  b.start = now();
  if (zero_stage_ >= 2 && !emulate_reduce_scatter_) {
    b.scattered = at::empty({b.padded / comm_.world}, options_);
    std::vector<at::Tensor> out{b.scattered};
    std::vector<std::vector<at::Tensor>> in{b.buffer.chunk(comm_.world)};
    try {
      b.work = comm_.pg->reduce_scatter(out, in);
    } catch (const c10::Error&) {  // "ProcessGroupGloo does not support reduce_scatter": every rank alike
      emulate_reduce_scatter_ = true;
      b.scattered = at::Tensor();
    }
  }
  if (!b.work) {
    std::vector<at::Tensor> tensors{b.buffer};
    b.work = comm_.pg->allreduce(tensors);
  }
  if (!measure_overlap_) return;
  try {
    b.work->getFuture()->addCallback([this, &b](c10::ivalue::Future&) { b.end.store(now()); });
    b.has_callback = true;
  } catch (const std::exception&) {
    measure_overlap_ = false;  // this backend's work has no future: only the wait is measured
  }
}

void Reducer::check_every_parameter_seen() const {
  if (next_launch_ == buckets_.size()) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!seen_[i]) {
      throw std::runtime_error("parameter " + names_[i] +
                               " received no gradient in backward; every parameter must take part in the loss");
    }
  }
}

void Reducer::wait_all(double backward_end) {
  check_every_parameter_seen();
  std::vector<CommInterval> intervals;
  for (auto& b : buckets_) {
    b.work->wait();
    if (b.has_callback) {
      while (b.end.load() == 0) std::this_thread::yield();  // the callback runs right after completion
    } else {
      b.end.store(now());
    }
    intervals.push_back({b.start, b.end.load()});
  }
  last_wait_s_ = now() - backward_end;
  last_timing_ = comm_timing(std::move(intervals), backward_end);
}

void Reducer::end_micro_batch() {
  if (zero_stage_ < 2) return;
  wait_all(now());
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    const int64_t c = b.padded / comm_.world;
    b.owned.add_(b.scattered.defined() ? b.scattered : b.buffer.narrow(0, comm_.rank * c, c));
    b.buffer = at::Tensor();
    b.scattered = at::Tensor();
    b.work.reset();
  }
}

at::Tensor Reducer::owned_grad(size_t index) const {
  const Bucket& b = buckets_[index];
  if (zero_stage_ >= 2) return b.owned;
  const int64_t c = b.padded / comm_.world;
  return b.buffer.narrow(0, comm_.rank * c, c);
}

size_t Reducer::gradient_bytes() const {
  size_t bytes = 0;
  for (const auto& b : buckets_) {
    for (const at::Tensor* t : {&b.buffer, &b.scattered, &b.owned}) {
      if (t->defined()) bytes += t->numel() * t->element_size();
    }
  }
  for (const auto& p : params_) {  // a .grad of its own, not a view into a bucket
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    const auto& storage = g.storage();
    bool in_bucket = false;
    for (const auto& b : buckets_) in_bucket = in_bucket || (b.buffer.defined() && b.buffer.storage().is_alias_of(storage));
    if (!in_bucket) bytes += g.numel() * g.element_size();
  }
  return bytes;
}

at::Tensor Reducer::finish(double max_norm, double loss_scale) {
  if (zero_stage_ < 2) wait_all(now());
  at::NoGradGuard no_grad;
  // In double: summed in another order (by chunks over the ranks with ZeRO), the norm, and so the
  // clipping scale, stays the same to the last bit of a float.
  std::vector<at::Tensor> squares;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    squares.push_back(at::norm(zero_stage_ == 0 ? buckets_[b].buffer : owned_grad(b), 2, at::kDouble).square());
  }
  std::vector<at::Tensor> total{at::stack(squares).sum().reshape({1})};
  if (zero_stage_ > 0) comm_.pg->allreduce(total)->wait();
  const at::Tensor norm = (total[0].sqrt() / loss_scale).reshape({}).to(options_.dtype());
  clip_scale_ = max_norm > 0 ? at::clamp_max(max_norm / (norm + 1e-6), 1.0) : at::Tensor();
  if (loss_scale != 1.0) clip_scale_ = (clip_scale_.defined() ? clip_scale_ : at::ones_like(norm)) / loss_scale;
  if (zero_stage_ < 2) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const Slot& s = slots_[i];
      params_[i].mutable_grad() = buckets_[s.bucket].buffer.narrow(0, s.offset, params_[i].numel()).view_as(params_[i]);
    }
  }
  return norm;
}

void Reducer::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
  if (zero_stage_ >= 2) {
    for (auto& b : buckets_) b.owned.zero_();
  }
}

}  // namespace dtl::train
