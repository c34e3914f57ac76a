// The process group (TCPStore hosted by rank 0; Gloo, or NCCL when built with it) and the
// gradient reducer: c10d::Reducer does not compile against Debian's libtorch, so this is ours.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "metrics.h"
#include "options.h"

namespace dtl::train {

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;  // Gloo and NCCL derive from Backend since 2.0
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

/// True when this build can use NCCL (libtorch with USE_C10D_NCCL and DTL_WITH_NCCL).
bool built_with_nccl();

struct Comm {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<ProcessGroupBase> pg;
  std::string backend;
  int rank = 0;
  int world = 1;
  ~Comm();  ///< shuts NCCL down cleanly
};

/// Rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT (unless the launcher's agent does:
/// TORCHELASTIC_USE_AGENT_STORE=True), the others connect; then the backend's
/// process group. A single process without MASTER_PORT uses an in-memory store. `timeout` bounds
/// the store and every collective, so a dead or stuck peer fails this rank instead of hanging it.
std::unique_ptr<Comm> connect(const LaunchEnv& env, const std::string& backend, c10::Device device,
                              std::chrono::milliseconds timeout);

/// The backend's process group over a store every rank reaches (connect's second half; tests
/// share one in-memory store between ranks in threads).
std::unique_ptr<Comm> form_group(c10::intrusive_ptr<c10d::Store> store, const LaunchEnv& env,
                                 const std::string& backend, c10::Device device, std::chrono::milliseconds timeout);

/// Makes every rank's tensors equal to rank 0's (one flat broadcast).
void broadcast_from_rank0(Comm& comm, const std::vector<at::Tensor>& tensors);

/// The mean of a scalar over the ranks.
double allreduce_mean(Comm& comm, const at::Tensor& scalar);

/// Averages gradients across ranks while backward runs: parameters are packed into buckets in
/// reverse registration order (roughly the order backward produces gradients); a hook on each
/// parameter's AccumulateGrad node copies its gradient into the bucket, and a full bucket starts
/// its allreduce, always in bucket order so every rank issues the same collectives in the same order.
///
/// With ZeRO (`zero_stage` 1 to 3) each bucket is padded to a multiple of the world size and cut
/// into as many equal chunks; rank r owns chunk r of every bucket (owned_grad()). Stage 1 keeps
/// the whole averaged buckets. Stages 2 and 3 reduce every micro-batch, keep only their chunks
/// (summed over the micro-batches) and free each bucket and each parameter's .grad once copied:
/// the backend's reduce_scatter where it has one, else an allreduce of which only the chunk is
/// kept. `buckets`, when given, are the buckets (indices into `params`, in the order backward
/// completes them), instead of packing by `bucket_bytes`: stage 3's units of parameters.
class Reducer {
 public:
  Reducer(Comm& comm, std::vector<at::Tensor> params, std::vector<std::string> names, size_t bucket_bytes,
          bool measure_overlap, int zero_stage = 0, const std::vector<std::vector<size_t>>& buckets = {});
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Before each micro-batch's backward: only the last one of a step (`sync`) communicates
  /// (every one with ZeRO stages 2 and 3).
  void prepare(bool sync);

  /// After each micro-batch's backward. Stages 2 and 3: waits for the buckets, adds this rank's chunk of
  /// each to its gradients and frees the buckets. Otherwise nothing.
  void end_micro_batch();

  /// After the last backward: waits for every bucket and leaves the averaged gradient in each
  /// parameter's .grad (a view into its bucket; not with stages 2 and 3). Returns the global norm of the
  /// gradients divided by `loss_scale` (what the loss was multiplied by before backward), as a
  /// 0-dim tensor (no device sync; with ZeRO the sum of every rank's chunks' squares, allreduced);
  /// it is not finite when a gradient is not. Unscaling and clipping to `max_norm` (0: none) are
  /// left to the optimizer, which multiplies the gradients by clip_scale() as it reads them: one
  /// pass over them fewer.
  at::Tensor finish(double max_norm, double loss_scale = 1.0);

  /// min(1, max_norm / norm) / loss_scale from the last finish(); undefined when that is 1.
  const at::Tensor& clip_scale() const { return clip_scale_; }

  /// Drops the gradients (their storage is the buckets') before the next step.
  void zero_grad();

  size_t bucket_count() const { return buckets_.size(); }
  /// The parameters of bucket `b` (indices into the constructor's list), their offsets in it, and
  /// its length with the padding.
  const std::vector<size_t>& bucket_params(size_t b) const { return buckets_[b].params; }
  int64_t offset_of(size_t param) const { return slots_[param].offset; }
  int64_t numel_of(size_t param) const { return slots_[param].numel; }
  int64_t padded_size(size_t b) const { return buckets_[b].padded; }
  /// ZeRO: this rank's chunk of bucket `b`'s averaged gradient, after finish().
  at::Tensor owned_grad(size_t b) const;
  /// Bytes of gradient storage alive now: buckets, chunks, and any .grad of its own.
  size_t gradient_bytes() const;
  /// Stages 2 and 3 without the backend's reduce_scatter (Gloo before torch 2.x): allreduce, keep a chunk.
  bool reduce_scatter_emulated() const { return emulate_reduce_scatter_; }
  double last_wait_s() const { return last_wait_s_; }  ///< time finish() waited for communication
  CommTiming last_timing() const { return last_timing_; }
  bool measures_overlap() const { return measure_overlap_; }

 private:
  struct Bucket {
    at::Tensor buffer;  ///< stages 2, 3: allocated for each micro-batch's backward, freed after it
    at::Tensor scattered;  ///< stages 2, 3 with reduce_scatter: this rank's reduced chunk
    at::Tensor owned;  ///< stages 2, 3: this rank's chunk, summed over a step's micro-batches
    int64_t padded = 0;
    std::vector<size_t> params;
    size_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
    double start = 0;
    std::atomic<double> end{0};
    bool has_callback = false;
  };
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
    int64_t numel = 0;  ///< the parameter's, as given (stage 3 empties parameters between uses)
  };

  void on_grad(size_t index);
  void launch(Bucket& b);
  /// Waits for every bucket's collective; the timing of this wait and the overlap.
  void wait_all(double backward_end);
  void check_every_parameter_seen() const;
  double now() const;

  Comm& comm_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  /// The hooks live on these (shared_ptr in libtorch 1.x, intrusive_ptr in recent 2.x).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators_;
  std::deque<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<char> seen_;
  size_t next_launch_ = 0;
  bool sync_ = false;
  bool measure_overlap_;
  int zero_stage_;
  bool emulate_reduce_scatter_ = false;
  at::TensorOptions options_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  double last_wait_s_ = 0;
  CommTiming last_timing_;
  at::Tensor clip_scale_;
  at::Tensor world_;  ///< the divisor of every gradient (0-dim: it leaves the gradients' dtype alone)
};

}  // namespace dtl::train
