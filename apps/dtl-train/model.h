// A GPT-2-style decoder-only transformer: token and learned position embeddings, pre-norm blocks
// of causal self-attention and a 4x GELU MLP, final LayerNorm, output tied to the token embedding.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "options.h"

namespace dtl::train {

class BlockImpl : public torch::nn::Module {
 public:
  /// `fused`: GELU and attention through fused_ops.h where they take the tensors (--kernels fused).
  BlockImpl(const ModelShape& shape, bool fused);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int heads_;
  double dropout_;
  bool fused_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, fc_proj_{nullptr};
  torch::Tensor causal_mask_;  ///< only where scaled_dot_product_attention is missing (libtorch 1.x)
};
TORCH_MODULE(Block);

/// Where ZeRO stage 3 keeps the blocks' parameters: gathered from every rank's shard just before a
/// block runs, released right after (the last block's after backward, by the host's owner).
/// `next` is the block that runs after this one (-1: none), whose gathering may start now.
class BlockParameters {
 public:
  virtual ~BlockParameters() = default;
  virtual void gather(int block, int next) = 0;
  virtual void release(int block) = 0;
};

class GptImpl : public torch::nn::Module {
 public:
  /// Initialises with GPT-2's scheme from the current torch seed; `fused` as for BlockImpl, and
  /// the loss through fused_classifier_loss (the parameters and what they compute are the same
  /// either way, to the rounding fused_ops.h states).
  explicit GptImpl(const ModelShape& shape, bool fused = true);
  /// (batch, time) token ids -> (batch, time, vocab) logits.
  torch::Tensor forward(const torch::Tensor& tokens);
  /// Mean next-token cross-entropy of (batch, context + 1) tokens, computed in fp32.
  torch::Tensor loss(const torch::Tensor& tokens);
  const ModelShape& shape() const { return shape_; }
  /// Activation checkpointing: in training, each block keeps only its input, and backward runs
  /// the block again to get what its gradients need (the same gradients, less memory).
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  /// ZeRO stage 3: each block gathers its parameters from `host` before it runs and releases them
  /// after, in forward and again in backward, which runs the block again (as with activation
  /// checkpointing: no activation keeps a released parameter alive); the last block keeps them
  /// from its forward to its backward instead. nullptr: they stay.
  void set_block_parameters(BlockParameters* host) { host_ = host; }

 private:
  /// The final LayerNorm's output: what the tied output layer multiplies.
  torch::Tensor hidden(const torch::Tensor& tokens);

  ModelShape shape_;
  bool fused_;
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  bool checkpointing_ = false;
  BlockParameters* host_ = nullptr;
};
TORCH_MODULE(Gpt);

/// The model's parameters in registration order, with their names and whether each takes weight
/// decay (matrices do; biases, gains and nothing else as GPT-2's training).
struct Parameters {
  std::vector<torch::Tensor> all;
  std::vector<std::string> names;
  std::vector<bool> decay;
  /// The parameters with decay, then those without: AdamW's two groups, in this order.
  std::vector<torch::Tensor> with_decay(bool decayed) const;
};
Parameters parameters_of(Gpt& model);

}  // namespace dtl::train
