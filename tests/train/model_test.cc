// dtl-train's model: activation checkpointing gives the gradients that keeping the activations
// gives, with dropout (the recompute draws the same masks) and under bf16 autocast (the recompute
// runs under it again, though backward runs outside it); the fast paths (--kernels fused) give the
// loss and gradients of torch's ops, in fp32 and under bf16 autocast.
// REQUIRE, not CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <set>

#include <torch/torch.h>

#include "autocast.h"
#include "model.h"

using dtl::train::Autocast;
using dtl::train::Gpt;
using dtl::train::ModelShape;

namespace {

struct Run {
  at::Tensor loss;
  std::vector<at::Tensor> grads;
  int recomputed_blocks = 0;  ///< the graph's nodes that run a block again in backward
};

int count_recompute_nodes(const at::Tensor& loss) {
  std::vector<torch::autograd::Node*> todo{loss.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int count = 0;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (node->name().find("Recompute") != std::string::npos) ++count;
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return count;
}

/// One forward and backward of a fresh model (the same parameters every time) on fixed tokens.
Run run(const ModelShape& shape, bool checkpointing, bool bf16, bool fused = true) {
  torch::manual_seed(7);
  Gpt model(shape, fused);
  model->train();
  model->set_activation_checkpointing(checkpointing);
  const at::Tensor tokens = torch::randint(shape.vocab, {3, shape.context + 1}, torch::kLong);
  torch::manual_seed(11);  // the dropout masks' stream
  Run r;
  {
    Autocast autocast(bf16 ? std::optional(at::kBFloat16) : std::nullopt, c10::kCPU);
    r.loss = model->loss(tokens);
  }
  r.recomputed_blocks = count_recompute_nodes(r.loss);
  r.loss.backward();  // outside autocast, as dtl-train does
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

/// |a - b| / |b| over the whole tensor, in double.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(torch::kDouble), y = b.to(torch::kDouble);
  return (x - y).norm().item<double>() / y.norm().item<double>();
}

void require_close(const Run& a, const Run& b, double loss_tolerance, double grad_tolerance) {
  REQUIRE(std::abs(a.loss.item<double>() - b.loss.item<double>()) <= loss_tolerance * b.loss.item<double>());
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(relative_error(a.grads[i], b.grads[i]) <= grad_tolerance);
  }
}

void require_same(const Run& a, const Run& b) {
  REQUIRE(a.loss.item<double>() == b.loss.item<double>());
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(a.grads[i].defined());
    REQUIRE(torch::equal(a.grads[i], b.grads[i]));
  }
}

}  // namespace

TEST_CASE("activation checkpointing gives the loss and gradients of keeping the activations, bit for bit") {
  const ModelShape shape{2, 64, 4, 32, 256, 0.0};
  const Run with = run(shape, true, false), without = run(shape, false, false);
  REQUIRE(with.recomputed_blocks == 2);  // each block keeps only its input
  REQUIRE(without.recomputed_blocks == 0);
  require_same(with, without);
}

TEST_CASE("activation checkpointing recomputes with the first run's dropout masks") {
  ModelShape shape{2, 64, 4, 32, 256, 0.2};
  const Run with = run(shape, true, false), without = run(shape, false, false);
  require_same(with, without);
  // The masks matter: another stream gives another loss, so equality above is not by accident.
  shape.dropout = 0.3;
  REQUIRE(run(shape, true, false).loss.item<double>() != with.loss.item<double>());
}

TEST_CASE("activation checkpointing recomputes under bf16 autocast when backward runs outside it") {
  const ModelShape shape{2, 64, 4, 32, 256, 0.0};
  const Run with = run(shape, true, true), without = run(shape, false, true);
  require_same(with, without);
  REQUIRE(with.loss.item<double>() != run(shape, true, false).loss.item<double>());  // autocast was on
}

TEST_CASE("the fused paths give the loss and gradients of torch's ops to fp32 rounding") {
  // 40 tokens: two attention blocks of the fused kernel, the second partial.
  const ModelShape shape{2, 32, 4, 40, 256, 0.0};
  require_close(run(shape, false, false, true), run(shape, false, false, false), 1e-6, 1e-5);
}

TEST_CASE(
    "under bf16 autocast the fused paths (torch's SDPA, the classifier in bf16) give torch's loss and gradients "
    "to bf16 rounding") {
  const ModelShape shape{2, 64, 4, 32, 256, 0.0};
  const Run fused = run(shape, false, true, true), plain = run(shape, false, true, false);
  require_close(fused, plain, 5e-4, 1.5e-2);
  REQUIRE(fused.loss.item<double>() != run(shape, false, false, true).loss.item<double>());  // autocast was on
}
