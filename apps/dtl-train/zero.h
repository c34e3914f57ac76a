// ZeRO: each rank keeps and steps the AdamW state of its own chunk of every gradient bucket
// (Reducer's layout). Stages 1 and 2 then all-gather every rank's updated chunk; stage 3 keeps only
// its chunk of the parameters too (ShardedParameters), and gathers a bucket just before its use.
// With offload (DeepSpeed's ZeRO-Offload), the chunks' AdamW state and an fp32 copy of the chunks
// live in host memory and the step runs there; the device keeps the parameters and gradients.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>

#include "comm.h"
#include "model.h"
#include "optim.h"

namespace dtl::train {

/// ZeRO stage 3's parameters: this rank's chunk of every bucket of the reducer (whose buckets are
/// one per block and one for the rest: embeddings and the final norm). A bucket is all-gathered
/// into a full buffer, of which its parameters become views, just before they are used, and
/// released after: the parameters are then empty tensors and the buffer is freed.
class ShardedParameters : public BlockParameters {
 public:
  /// Cuts every bucket of `params` (equal on every rank) into this rank's chunks, then releases
  /// them all. `block_buckets[i]`: block i's bucket; `rest_bucket`: the others'.
  ShardedParameters(Comm& comm, const Reducer& reducer, std::vector<at::Tensor> params,
                    std::vector<size_t> block_buckets, size_t rest_bucket);

  void gather(int block, int next) override;
  void release(int block) override;
  /// Before a micro-batch's forward: the embeddings and the final norm, kept until its backward
  /// ends. After it: releases them, and the last block, which its forward kept for backward.
  void before_forward() { place(rest_bucket_); }
  void after_backward() { release_all(); }
  /// Every parameter, for a checkpoint or the final dump; every rank must call them alike.
  void gather_all();
  void release_all();

  /// This rank's chunk of bucket `b`: the optimizer steps it in place.
  const at::Tensor& chunk(size_t b) const { return units_[b].chunk; }
  /// Bytes of parameters held now: the chunks and any gathered buffer.
  size_t bytes() const;

 private:
  struct Unit {
    at::Tensor chunk;                     ///< this rank's, always held
    at::Tensor full;                      ///< the gathered bucket, while its parameters are in use
    c10::intrusive_ptr<c10d::Work> work;  ///< its all-gather, until placed
    bool placed = false;
  };
  void start(size_t b);
  void place(size_t b);
  void drop(size_t b);

  Comm& comm_;
  const Reducer& reducer_;
  std::vector<at::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Unit> units_;
  std::vector<size_t> block_buckets_;
  size_t rest_bucket_;
};

class ShardedAdamW {
 public:
  /// One of this rank's pieces: `length` elements of parameter `param` (an index into the
  /// constructor's `params`) from its element `offset` on.
  struct Piece {
    int64_t param = 0, offset = 0, length = 0;
    bool operator==(const Piece&) const = default;
  };
  /// What a shard file holds, read without a process group (dtl-train --consolidate).
  struct Shard {
    int world = 0, rank = 0;
    std::vector<std::vector<Piece>> pieces;             ///< [group][index]: decayed, then not
    std::vector<std::vector<FusedAdamW::State>> state;  ///< the same shape
  };

  /// Makes each bucket's parameters views into one flat buffer laid out as the bucket (padded as
  /// it is), so that a chunk of the bucket is a chunk of parameters; with `stage3`, steps its
  /// chunks instead. `decay[i]`: whether params[i] takes `weight_decay`. `offload`: the state and
  /// the step in host memory (pinned when the parameters are on a GPU), even for CPU parameters.
  ShardedAdamW(Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
               const std::vector<bool>& decay, double weight_decay, double lr, double beta1, double beta2,
               const ShardedParameters* stage3 = nullptr, bool offload = false);

  void set_lr(double lr) { adamw_.set_lr(lr); }

  /// Steps this rank's chunks with their gradients (times `grad_scale`, as FusedAdamW::step), then
  /// (stages 1 and 2) all-gathers every bucket so that every rank has every parameter. With
  /// offload: copies the gradient chunks to the host, steps there, copies the chunks back.
  void step(const at::Tensor& grad_scale);

  /// Bytes of AdamW state this rank holds (its chunks' moments), in host memory with offload.
  size_t state_bytes() const;
  bool offloaded() const { return !offload_.empty(); }
  /// Bytes of the parameters' flat buffers (stage 3: of what ShardedParameters holds).
  size_t parameter_bytes() const;

  /// This rank's state, with the world size it was cut for and where each piece lies; load
  /// refuses another world size or rank.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);
  static Shard read(torch::serialize::InputArchive& archive);

  /// Takes this rank's pieces of the state of `whole`, an optimizer over the same `params`, the
  /// decayed ones then the others, each group in `params`' order (a stage 0 checkpoint's).
  void take_whole(const FusedAdamW& whole, const std::vector<bool>& decay);

 private:
  /// One bucket's chunk on the device and its host copies, with offload.
  struct Offloaded {
    at::Tensor device_chunk, device_grad;  ///< this rank's chunk of the parameters and of the gradient
    at::Tensor host_chunk, host_grad;      ///< what the host steps, in fp32
  };
  struct Pieces {
    std::vector<at::Tensor> flat;
    std::vector<Offloaded> offload;
    std::vector<FusedAdamW::Group> groups;  ///< this rank's pieces of parameters: decayed, then not
    std::vector<std::vector<Piece>> where;  ///< where each of them lies
  };
  static Pieces cut(const Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
                    const std::vector<bool>& decay, double weight_decay, const ShardedParameters* stage3, bool offload);
  ShardedAdamW(Comm& comm, Pieces pieces, double lr, double beta1, double beta2, const ShardedParameters* stage3);

  Comm& comm_;
  const ShardedParameters* stage3_;
  std::vector<at::Tensor> flat_;           ///< per bucket: its parameters, padded
  std::vector<Offloaded> offload_;         ///< per bucket, with offload
  std::vector<std::vector<Piece>> where_;  ///< [group][index] of adamw_'s parameters
  FusedAdamW adamw_;                       ///< over this rank's pieces of parameters, grads set to the reducer's chunks
};

}  // namespace dtl::train
