// ZeRO stages 1 and 2: each rank keeps and steps the AdamW state of its own chunk of every
// gradient bucket (Reducer's layout), then every rank's updated chunk is all-gathered.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>

#include "comm.h"
#include "optim.h"

namespace dtl::train {

class ShardedAdamW {
 public:
  /// One of this rank's pieces: `length` elements of parameter `param` (an index into the
  /// constructor's `params`) from its element `offset` on.
  struct Piece {
    int64_t param = 0, offset = 0, length = 0;
  };
  /// What a shard file holds, read without a process group (dtl-train --consolidate).
  struct Shard {
    int world = 0, rank = 0;
    std::vector<std::vector<Piece>> pieces;             ///< [group][index]: decayed, then not
    std::vector<std::vector<FusedAdamW::State>> state;  ///< the same shape
  };

  /// Makes each bucket's parameters views into one flat buffer laid out as the bucket (padded as
  /// it is), so that a chunk of the bucket is a chunk of parameters. `decay[i]`: whether
  /// params[i] takes `weight_decay`.
  ShardedAdamW(Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
               const std::vector<bool>& decay, double weight_decay, double lr, double beta1, double beta2);

  void set_lr(double lr) { adamw_.set_lr(lr); }

  /// Steps this rank's chunks with their gradients (times `grad_scale`, as FusedAdamW::step), then
  /// all-gathers every bucket so that every rank has every parameter.
  void step(const at::Tensor& grad_scale);

  /// Bytes of AdamW state this rank holds (its chunks' moments).
  size_t state_bytes() const;
  /// Bytes of the parameters' flat buffers.
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
  struct Pieces {
    std::vector<at::Tensor> flat;
    std::vector<FusedAdamW::Group> groups;  ///< this rank's pieces of parameters: decayed, then not
    std::vector<std::vector<Piece>> where;  ///< where each of them lies
  };
  static Pieces cut(const Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
                    const std::vector<bool>& decay, double weight_decay);
  ShardedAdamW(Comm& comm, Pieces pieces, double lr, double beta1, double beta2);

  Comm& comm_;
  std::vector<at::Tensor> flat_;           ///< per bucket: its parameters, padded
  std::vector<std::vector<Piece>> where_;  ///< [group][index] of adamw_'s parameters
  FusedAdamW adamw_;                       ///< over this rank's pieces of parameters, grads set to the reducer's chunks
};

}  // namespace dtl::train
