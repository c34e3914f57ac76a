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

  /// This rank's state, with the world size it was cut for; load refuses another.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  struct Pieces {
    std::vector<at::Tensor> flat;
    std::vector<FusedAdamW::Group> groups;  ///< this rank's pieces of parameters: decayed, then not
  };
  static Pieces cut(const Comm& comm, const Reducer& reducer, const std::vector<at::Tensor>& params,
                    const std::vector<bool>& decay, double weight_decay);
  ShardedAdamW(Comm& comm, Pieces pieces, double lr, double beta1, double beta2);

  Comm& comm_;
  std::vector<at::Tensor> flat_;  ///< per bucket: its parameters, padded
  FusedAdamW adamw_;              ///< over this rank's pieces of parameters, grads set to the reducer's chunks
};

}  // namespace dtl::train
