#include "model.h"

#include <cmath>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/loss.h>
#include <torch/autograd.h>
#include <torch/nn/init.h>
#include <torch/version.h>

#include <ATen/Context.h>

#include "autocast.h"
#include "fused_ops.h"

namespace dtl::train {

namespace F = torch::nn::functional;

namespace {

/// ATen's linear, as Python's nn.Linear calls it: the bias joins the matrix product (addmm).
/// torch::nn::Linear::forward goes through the C++ frontend's F::linear, which for 3-D input
/// multiplies and then adds the bias in a pass of its own.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// A block run without keeping its activations: backward runs it again, with grad mode on and the
/// first run's autocast and random state (its dropout masks), and backpropagates through that.
/// This is torch.utils.checkpoint's reentrant form; the parameters' gradients arrive through
/// their own accumulators, so the gradient reducer's hooks see them as without it. With a `host`
/// (ZeRO stage 3) the block's parameters are gathered around each of its two runs.
class Recompute : public torch::autograd::Function<Recompute> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, BlockImpl* block, bool random,
                               BlockParameters* host, int64_t index, int64_t count) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);  // the module outlives its graph
    ctx->saved_data["host"] = reinterpret_cast<int64_t>(host);
    ctx->saved_data["index"] = index;
    const auto dtype = autocast_dtype(x.device());  // -1: off
    ctx->saved_data["autocast"] = dtype ? static_cast<int64_t>(*dtype) : int64_t{-1};
    if (random) ctx->saved_data["rng"] = at::globalContext().defaultGenerator(x.device()).get_state();
    ctx->save_for_backward({x});
    if (host) host->gather(static_cast<int>(index), index + 1 < count ? static_cast<int>(index + 1) : -1);
    torch::Tensor y = block->forward(x);
    if (host) host->release(static_cast<int>(index));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* block = reinterpret_cast<BlockImpl*>(ctx->saved_data["block"].toInt());
    auto* host = reinterpret_cast<BlockParameters*>(ctx->saved_data["host"].toInt());
    const int index = static_cast<int>(ctx->saved_data["index"].toInt());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    if (host) host->gather(index, index - 1);
    at::Tensor y;
    {
      torch::AutoGradMode grad_mode(true);
      const int64_t dtype = ctx->saved_data["autocast"].toInt();
      Autocast autocast(dtype < 0 ? std::nullopt : std::optional(static_cast<c10::ScalarType>(dtype)), x.device());
      auto it = ctx->saved_data.find("rng");
      if (it == ctx->saved_data.end()) {
        y = block->forward(x);
      } else {
        at::Generator generator = at::globalContext().defaultGenerator(x.device());
        const at::Tensor now = generator.get_state();
        generator.set_state(it->second.toTensor());
        y = block->forward(x);
        generator.set_state(now);
      }
    }
    torch::autograd::backward({y}, {grads[0]});
    if (host) host->release(index);
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

BlockImpl::BlockImpl(const ModelShape& s, bool fused) : heads_(s.heads), dropout_(s.dropout), fused_(fused) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.width})));
  qkv_ = register_module("qkv", torch::nn::Linear(s.width, 3 * s.width));
  proj_ = register_module("proj", torch::nn::Linear(s.width, s.width));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.width})));
  fc_ = register_module("fc", torch::nn::Linear(s.width, 4 * s.width));
  fc_proj_ = register_module("fc_proj", torch::nn::Linear(4 * s.width, s.width));
#if TORCH_VERSION_MAJOR < 2
  causal_mask_ = register_buffer("causal_mask", torch::ones({s.context, s.context}, torch::kBool).triu(1));
#endif
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  const bool train = is_training() && dropout_ > 0;
  auto qkv = linear(qkv_, ln1_->forward(x));
  torch::Tensor y;
  if (fused_ && !train && fused_attention_usable(qkv)) {
    y = fused_causal_attention(qkv, heads_);
  } else if (fused_) {
    y = sdpa_causal_attention(qkv, heads_, train ? dropout_ : 0.0);
  } else {
    auto heads = qkv.view({B, T, 3, heads_, C / heads_}).permute({2, 0, 3, 1, 4});
    auto q = heads[0], k = heads[1], v = heads[2];  // (B, heads, T, head width)
#if TORCH_VERSION_MAJOR >= 2
    y = at::scaled_dot_product_attention(q, k, v, {}, train ? dropout_ : 0.0, /*is_causal=*/true);
#else
    // Scaling q (T x head width) is cheaper than scaling the T x T scores; the mask is applied in place.
    auto att = torch::matmul(q * (1.0 / std::sqrt(static_cast<double>(C / heads_))), k.transpose(-2, -1));
    att.masked_fill_(causal_mask_.narrow(0, 0, T).narrow(1, 0, T), -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    if (train) att = F::dropout(att, F::DropoutFuncOptions().p(dropout_).training(true));
    y = torch::matmul(att, v);
#endif
    y = y.transpose(1, 2).reshape({B, T, C});
  }
  y = linear(proj_, y);
  if (train) y = F::dropout(y, F::DropoutFuncOptions().p(dropout_).training(true));
  auto h = x + y;
  auto u = linear(fc_, ln2_->forward(h));
  auto m = linear(fc_proj_, fused_ && fused_gelu_usable(u) ? fused_gelu_tanh(u) : torch::gelu(u, "tanh"));
  if (train) m = F::dropout(m, F::DropoutFuncOptions().p(dropout_).training(true));
  return h + m;
}

GptImpl::GptImpl(const ModelShape& s, bool fused) : shape_(s), fused_(fused) {
  tok_ = register_module("tok", torch::nn::Embedding(s.vocab, s.width));
  pos_ = register_module("pos", torch::nn::Embedding(s.context, s.width));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < s.layers; ++i) blocks_->push_back(Block(s, fused));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.width})));

  // GPT-2: N(0, 0.02) everywhere, residual projections scaled down by sqrt(2 * layers).
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * s.layers);
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    if (name.ends_with(".bias")) {
      p.zero_();
    } else if (name.find("ln") != std::string::npos) {
      p.fill_(1.0);
    } else if (name.ends_with("proj.weight")) {
      p.normal_(0.0, residual_std);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) { return torch::linear(hidden(tokens), tok_->weight); }

torch::Tensor GptImpl::hidden(const torch::Tensor& tokens) {
  const auto T = tokens.size(1);
  auto x = tok_->forward(tokens) + pos_->weight.narrow(0, 0, T);
  if (is_training() && shape_.dropout > 0) {
    x = F::dropout(x, F::DropoutFuncOptions().p(shape_.dropout).training(true));
  }
  const bool grad = is_training() && torch::GradMode::is_enabled();
  const int64_t count = static_cast<int64_t>(blocks_->size());
  for (int64_t i = 0; i < count; ++i) {
    BlockImpl* b = (*blocks_)[i]->as<Block>();
    // With a host the last block's backward comes right after its forward: it keeps its
    // parameters and activations for it (the host releases them after backward) instead of
    // running again, unless activation checkpointing was asked for.
    const bool last_kept = host_ && grad && !checkpointing_ && i == count - 1;
    if (grad && (checkpointing_ || host_) && !last_kept) {
      x = Recompute::apply(x, b, shape_.dropout > 0, host_, i, count);
    } else if (host_) {
      host_->gather(static_cast<int>(i), i + 1 < count ? static_cast<int>(i + 1) : -1);
      x = b->forward(x);
      if (!last_kept) host_->release(static_cast<int>(i));
    } else {
      x = b->forward(x);
    }
  }
  return ln_f_->forward(x);
}

torch::Tensor GptImpl::loss(const torch::Tensor& tokens) {
  const auto T = tokens.size(1) - 1;
  auto targets = tokens.narrow(1, 1, T).reshape({-1});
  if (fused_) {
    const at::Tensor h = hidden(tokens.narrow(1, 0, T));
    const c10::ScalarType dtype = autocast_dtype(h.device()).value_or(h.scalar_type());
    return fused_classifier_loss(h.reshape({-1, h.size(-1)}), tok_->weight, targets, dtype);
  }
  auto logits = forward(tokens.narrow(1, 0, T));
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), targets);
}

Parameters parameters_of(Gpt& model) {
  Parameters p;
  for (auto& item : model->named_parameters()) {
    p.all.push_back(item.value());
    p.names.push_back(item.key());
    p.decay.push_back(item.value().dim() >= 2);
  }
  return p;
}

std::vector<torch::Tensor> Parameters::with_decay(bool decayed) const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (decay[i] == decayed) out.push_back(all[i]);
  }
  return out;
}

}  // namespace dtl::train
