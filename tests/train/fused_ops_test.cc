// dtl-train's fast paths against the torch ops they replace: the fused CPU GELU and causal
// attention (values and gradients, over shapes that leave partial vectors and partial attention
// blocks, and with NaN), torch's SDPA as the model calls it, and the fused classifier in fp32, bf16
// and double, in one chunk and in several.
// REQUIRE, not CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <torch/nn/functional/loss.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include "blas.h"
#include "cpu_kernels.h"
#include "fused_ops.h"

using dtl::train::fused_attention_usable;
using dtl::train::fused_causal_attention;
using dtl::train::fused_classifier_loss;
using dtl::train::fused_gelu_tanh;
using dtl::train::fused_gelu_usable;
using dtl::train::sdpa_backend;
using dtl::train::sdpa_causal_attention;

namespace {

/// |a - b| / |b| over the whole tensor, in double.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().to(torch::kDouble), y = b.detach().to(torch::kDouble);
  return (x - y).norm().item<double>() / y.norm().item<double>();
}

double max_abs_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.detach().to(torch::kDouble) - b.detach().to(torch::kDouble)).abs().max().item<double>();
}

/// The model's attention written with torch's ops (the 1.13 path of model.cc), in any dtype.
at::Tensor reference_attention(const at::Tensor& qkv, int64_t heads) {
  const auto B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto t = qkv.view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
  auto att = torch::matmul(t[0], t[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(C / heads));
  auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(att, t[2]).transpose(1, 2).reshape({B, T, C});
}

struct Grads {
  at::Tensor value, grad;
};

/// f(x) and d(sum(f(x) * w))/dx for fixed random weights w.
template <typename F>
Grads run(F f, const at::Tensor& x, const at::Tensor& w) {
  at::Tensor leaf = x.detach().clone().requires_grad_();
  at::Tensor y = f(leaf);
  (y * w.to(y.scalar_type())).sum().backward();
  return {y.detach(), leaf.grad()};
}

}  // namespace

TEST_CASE("the fused GELU computes torch's tanh GELU and its gradient", "[train][fused]") {
  torch::manual_seed(3);
  // Odd sizes: a partial vector at the end; large values: tanh saturates; zeros and tiny values.
  for (int64_t n : {1, 15, 17, 1000, 70001}) {
    at::Tensor x = torch::randn({n}) * 4;
    x.index_put_({0}, 0.0f);
    if (n > 3) {
      x.index_put_({1}, 30.0f);
      x.index_put_({2}, -30.0f);
      x.index_put_({3}, 1e-20f);
    }
    const at::Tensor w = torch::randn({n});
    const Grads mine = run([](const at::Tensor& t) { return fused_gelu_tanh(t); }, x, w);
    // The exact function, in double: both the fused GELU and torch's float one are compared to it.
    const Grads exact = run([](const at::Tensor& t) { return torch::gelu(t, "tanh"); }, x.to(torch::kDouble), w);
    const Grads torch_float = run([](const at::Tensor& t) { return torch::gelu(t, "tanh"); }, x, w);
    INFO("n = " << n);
    REQUIRE(mine.value.scalar_type() == torch::kFloat);
    REQUIRE(max_abs_error(mine.value, exact.value) <= 2 * max_abs_error(torch_float.value, exact.value) + 1e-6);
    REQUIRE(max_abs_error(mine.grad, exact.grad) <= 2 * max_abs_error(torch_float.grad, exact.grad) + 1e-6);
    REQUIRE(relative_error(mine.grad, exact.grad) < 1e-6);
  }
}

TEST_CASE("the fused GELU takes non-contiguous input and keeps NaN", "[train][fused]") {
  torch::manual_seed(4);
  at::Tensor x = torch::randn({64, 48}).t();  // transposed: not contiguous
  REQUIRE(!x.is_contiguous());
  REQUIRE(relative_error(fused_gelu_tanh(x), torch::gelu(x, "tanh")) < 1e-6);
  at::Tensor y = torch::tensor({1.0f, std::nanf(""), -2.0f});
  at::Tensor g = fused_gelu_tanh(y);
  REQUIRE(std::isnan(g[1].item<float>()));
  REQUIRE(!std::isnan(g[0].item<float>()));
}

TEST_CASE("the fused GELU and attention take CPU float tensors only", "[train][fused]") {
  REQUIRE(fused_gelu_usable(torch::zeros({2})));
  REQUIRE(!fused_gelu_usable(torch::zeros({2}, torch::kBFloat16)));
  REQUIRE(!fused_gelu_usable(torch::zeros({2}, torch::kDouble)));
  REQUIRE(!fused_attention_usable(torch::zeros({1, 2, 6}, torch::kBFloat16)));
  // libtorch's BLAS is in this process (Debian's libtorch loads libblas.so.3, which has cblas_sgemm).
  REQUIRE(fused_attention_usable(torch::zeros({1, 2, 6})));
}

TEST_CASE("fused causal attention computes the masked softmax attention and its gradient", "[train][fused]") {
  torch::manual_seed(5);
  struct Shape {
    int64_t batch, time, heads, head_dim;
  };
  // One token; fewer tokens than a block; a partial last block; several full blocks; one head.
  const int64_t block = dtl::train::kAttentionBlock;
  for (Shape s : {Shape{1, 1, 2, 4}, Shape{2, 5, 3, 8}, Shape{2, block + 7, 4, 16}, Shape{1, 3 * block, 2, 64},
                  Shape{3, 20, 1, 5}}) {
    const int64_t C = s.heads * s.head_dim;
    const at::Tensor qkv = torch::randn({s.batch, s.time, 3 * C});
    const at::Tensor w = torch::randn({s.batch, s.time, C});
    const auto fused = [&](const at::Tensor& t) { return fused_causal_attention(t, s.heads); };
    const auto reference = [&](const at::Tensor& t) { return reference_attention(t, s.heads); };
    const Grads mine = run(fused, qkv, w);
    const Grads exact = run(reference, qkv.to(torch::kDouble), w);
    const Grads torch_float = run(reference, qkv, w);
    INFO("batch " << s.batch << " time " << s.time << " heads " << s.heads << " head_dim " << s.head_dim);
    REQUIRE(mine.value.sizes() == exact.value.sizes());
    REQUIRE(mine.grad.sizes() == qkv.sizes());
    REQUIRE(relative_error(mine.value, exact.value) < 1e-6);
    REQUIRE(relative_error(mine.grad, exact.grad) < 1e-5);
    // As close to the exact values as torch's own float ops are, within a factor.
    REQUIRE(max_abs_error(mine.value, exact.value) <= 4 * max_abs_error(torch_float.value, exact.value) + 1e-7);
    REQUIRE(max_abs_error(mine.grad, exact.grad) <= 4 * max_abs_error(torch_float.grad, exact.grad) + 1e-7);
  }
}

TEST_CASE("fused causal attention: a token sees only itself and earlier tokens", "[train][fused]") {
  torch::manual_seed(6);
  const int64_t T = 40, heads = 2, C = 16;
  at::Tensor qkv = torch::randn({1, T, 3 * C});
  const at::Tensor before = fused_causal_attention(qkv, heads);
  qkv.narrow(1, 25, T - 25).normal_();  // change tokens 25.. only
  const at::Tensor after = fused_causal_attention(qkv, heads);
  REQUIRE(torch::equal(before.narrow(1, 0, 25), after.narrow(1, 0, 25)));
  REQUIRE(!torch::equal(before.narrow(1, 25, T - 25), after.narrow(1, 25, T - 25)));
}

TEST_CASE("fused causal attention: NaN in a token's query shows up in that token's output", "[train][fused]") {
  at::Tensor qkv = torch::randn({1, 6, 3 * 8});
  qkv[0][3][0] = std::nanf("");  // the query of token 3, head 0
  const at::Tensor y = fused_causal_attention(qkv, 2);
  REQUIRE(torch::isnan(y[0][3].narrow(0, 0, 4)).all().item<bool>());
  REQUIRE(!torch::isnan(y[0][2]).any().item<bool>());
}

TEST_CASE("the attention kernel gives the same bits through cblas_sgemm and through the Fortran sgemm_",
          "[train][fused]") {
  // Debian's BLAS has both; the pip wheels' libtorch has only sgemm_, which dtl-train then calls
  // (there both routes below are that one).
  const dtl::train::CblasSgemm fortran = dtl::train::process_fortran_sgemm();
  REQUIRE(fortran != nullptr);
  torch::manual_seed(7);
  const dtl::train::AttentionShape s{2, 45, 3, 8};
  const at::Tensor qkv = torch::randn({s.batch, s.time, 3 * s.width()});
  const at::Tensor dy = torch::randn({s.batch, s.time, s.width()});
  at::Tensor y[2], probs[2], dqkv[2];
  std::vector<float> scratch(static_cast<size_t>(dtl::train::kAttentionBlock) * s.time);
  const dtl::train::CblasSgemm routes[2] = {dtl::train::process_cblas_sgemm(), fortran};
  for (int r = 0; r < 2; ++r) {
    y[r] = torch::empty({s.batch, s.time, s.width()});
    probs[r] = torch::empty({s.batch, s.heads, s.time, s.time});
    dqkv[r] = torch::empty_like(qkv);
    dtl::train::causal_attention_forward(routes[r], s, 0, s.pairs(), qkv.data_ptr<float>(), y[r].data_ptr<float>(),
                                         probs[r].data_ptr<float>());
    dtl::train::causal_attention_backward(routes[r], s, 0, s.pairs(), qkv.data_ptr<float>(), probs[r].data_ptr<float>(),
                                          dy.data_ptr<float>(), dqkv[r].data_ptr<float>(), scratch.data());
  }
  REQUIRE(relative_error(y[0], reference_attention(qkv, s.heads)) < 1e-6);
  REQUIRE(torch::equal(y[0], y[1]));
  REQUIRE(torch::equal(dqkv[0], dqkv[1]));
}

TEST_CASE("torch's SDPA, called as the model calls it, computes the masked softmax attention and its gradient",
          "[train][fused]") {
  torch::manual_seed(8);
  struct Shape {
    int64_t batch, time, heads, head_dim;
  };
  for (Shape s : {Shape{1, 1, 2, 4}, Shape{2, 5, 3, 8}, Shape{2, 45, 4, 16}, Shape{3, 20, 1, 5}}) {
    const int64_t C = s.heads * s.head_dim;
    const at::Tensor qkv = torch::randn({s.batch, s.time, 3 * C});
    const at::Tensor w = torch::randn({s.batch, s.time, C});
    const auto sdpa = [&](const at::Tensor& t) { return sdpa_causal_attention(t, s.heads, 0.0); };
    const auto reference = [&](const at::Tensor& t) { return reference_attention(t, s.heads); };
    INFO("batch " << s.batch << " time " << s.time << " heads " << s.heads << " head_dim " << s.head_dim);
    // In double the two are the same function: they agree to double rounding.
    const Grads sdpa_double = run(sdpa, qkv.to(torch::kDouble), w);
    const Grads exact = run(reference, qkv.to(torch::kDouble), w);
    REQUIRE(sdpa_double.value.sizes() == exact.value.sizes());
    REQUIRE(relative_error(sdpa_double.value, exact.value) < 1e-12);
    REQUIRE(relative_error(sdpa_double.grad, exact.grad) < 1e-12);
    // In fp32, as close to the exact values as torch's own float ops are, within a factor; and the
    // fused CPU kernel, which the model runs instead where it can, agrees with it.
    const Grads mine = run(sdpa, qkv, w);
    const Grads torch_float = run(reference, qkv, w);
    REQUIRE(max_abs_error(mine.value, exact.value) <= 4 * max_abs_error(torch_float.value, exact.value) + 1e-7);
    REQUIRE(max_abs_error(mine.grad, exact.grad) <= 4 * max_abs_error(torch_float.grad, exact.grad) + 1e-7);
    const Grads fused = run([&](const at::Tensor& t) { return fused_causal_attention(t, s.heads); }, qkv, w);
    REQUIRE(relative_error(mine.value, fused.value) < 1e-6);
    REQUIRE(relative_error(mine.grad, fused.grad) < 1e-5);
  }
}

TEST_CASE("torch's SDPA drops attention weights only with dropout", "[train][fused]") {
  torch::manual_seed(9);
  const at::Tensor qkv = torch::randn({2, 12, 3 * 8});
  const at::Tensor plain = sdpa_causal_attention(qkv, 2, 0.0);
  REQUIRE(torch::equal(plain, sdpa_causal_attention(qkv, 2, 0.0)));
  REQUIRE(!torch::allclose(plain, sdpa_causal_attention(qkv, 2, 0.5)));
}

TEST_CASE("the attention backend named is torch's own choice for the tensors", "[train][fused]") {
  const at::Tensor qkv = torch::zeros({2, 16, 3 * 32});
#if TORCH_VERSION_MAJOR >= 2
  // On a CPU torch runs its flash kernel where it takes the inputs, else the math backend.
  const std::string name = sdpa_backend(qkv, 4, 0.0);
  REQUIRE((name == "flash" || name == "math"));
#else
  REQUIRE(sdpa_backend(qkv, 4, 0.0) == "math");  // libtorch 1.x has no other
#endif
}

namespace {

struct ClassifierRun {
  at::Tensor loss, dx, dw;
};

/// The loss and its gradients, the loss multiplied by 3.5 before backward (a gradient other than 1,
/// as a loss scaler or gradient accumulation give).
template <typename F>
ClassifierRun run_classifier(F f, const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets) {
  const at::Tensor xl = x.detach().clone().requires_grad_(), wl = w.detach().clone().requires_grad_();
  const at::Tensor loss = f(xl, wl, targets);
  (loss * 3.5).backward();
  return {loss.detach(), xl.grad(), wl.grad()};
}

/// What the model computed before the fused classifier, the logits in `dtype`.
ClassifierRun reference_classifier(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                                   at::ScalarType dtype) {
  return run_classifier(
      [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& t) {
        const at::Tensor logits = at::linear(a.to(dtype), b.to(dtype));
        return torch::nn::functional::cross_entropy(logits.to(dtype == at::kDouble ? at::kDouble : at::kFloat), t);
      },
      x, w, targets);
}

ClassifierRun fused_classifier(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                               at::ScalarType dtype, int64_t chunk, std::optional<at::ScalarType> kept = {}) {
  return run_classifier([&](const at::Tensor& a, const at::Tensor& b,
                            const at::Tensor& t) { return fused_classifier_loss(a, b, t, dtype, chunk, kept); },
                        x, w, targets);
}

double abs_error(const at::Tensor& a, const at::Tensor& b) { return max_abs_error(a.reshape({-1}), b.reshape({-1})); }

}  // namespace

TEST_CASE("the fused classifier computes torch's cross-entropy and its gradients, in one chunk and in several",
          "[train][fused]") {
  torch::manual_seed(10);
  const int64_t rows = 37, width = 16, vocab = 29;  // odd sizes: uneven chunks of rows
  const at::Tensor x = torch::randn({rows, width}), w = torch::randn({vocab, width}) * 0.5;
  const at::Tensor targets = torch::randint(vocab, {rows}, torch::kLong);
  const ClassifierRun exact = reference_classifier(x.to(torch::kDouble), w.to(torch::kDouble), targets, at::kDouble);
  const ClassifierRun torch_float = reference_classifier(x, w, targets, at::kFloat);
  // One chunk; 100 logits (3 rows) a chunk; one row a chunk.
  for (int64_t chunk : {dtl::train::kClassifierChunk, int64_t{100}, int64_t{1}}) {
    INFO("chunk " << chunk);
    const ClassifierRun in_double =
        fused_classifier(x.to(torch::kDouble), w.to(torch::kDouble), targets, at::kDouble, chunk);
    REQUIRE(in_double.loss.scalar_type() == at::kDouble);
    REQUIRE(std::abs(in_double.loss.item<double>() - exact.loss.item<double>()) < 1e-12);
    REQUIRE(relative_error(in_double.dx, exact.dx) < 1e-12);
    REQUIRE(relative_error(in_double.dw, exact.dw) < 1e-12);

    const ClassifierRun mine = fused_classifier(x, w, targets, at::kFloat, chunk);
    REQUIRE(mine.loss.scalar_type() == at::kFloat);
    REQUIRE(mine.dx.scalar_type() == at::kFloat);
    REQUIRE(mine.dw.sizes() == w.sizes());
    REQUIRE(std::abs(mine.loss.item<double>() - exact.loss.item<double>()) < 1e-6 * exact.loss.item<double>());
    REQUIRE(relative_error(mine.dx, exact.dx) < 1e-6);
    REQUIRE(relative_error(mine.dw, exact.dw) < 1e-6);
    REQUIRE(abs_error(mine.dx, exact.dx) <= 4 * abs_error(torch_float.dx, exact.dx) + 1e-8);
    REQUIRE(abs_error(mine.dw, exact.dw) <= 4 * abs_error(torch_float.dw, exact.dw) + 1e-8);
  }
}

TEST_CASE("in bf16 the fused classifier is as close to the exact loss and gradients as torch's cast to fp32",
          "[train][fused]") {
  torch::manual_seed(11);
  const int64_t rows = 64, width = 32, vocab = 500;
  const at::Tensor x = torch::randn({rows, width}), w = torch::randn({vocab, width}) * 0.3;
  const at::Tensor targets = torch::randint(vocab, {rows}, torch::kLong);
  // Exact for the bf16-rounded inputs both start from.
  const at::Tensor xb = x.to(torch::kBFloat16).to(torch::kDouble), wb = w.to(torch::kBFloat16).to(torch::kDouble);
  const ClassifierRun exact = reference_classifier(xb, wb, targets, at::kDouble);
  const ClassifierRun torch_bf16 = reference_classifier(x, w, targets, at::kBFloat16);
  // bf16 keeps the probabilities; fp16's branch keeps them in fp32 (bf16 stands in for fp16 here,
  // which a CPU's libtorch 1.x cannot multiply).
  for (std::optional<at::ScalarType> kept : {std::optional<at::ScalarType>{}, std::optional(at::kFloat)}) {
    for (int64_t chunk : {dtl::train::kClassifierChunk, int64_t{1000}}) {
      INFO("kept " << (kept ? "fp32" : "bf16") << ", chunk " << chunk);
      const ClassifierRun mine = fused_classifier(x, w, targets, at::kBFloat16, chunk, kept);
      REQUIRE(mine.loss.scalar_type() == at::kFloat);
      REQUIRE(mine.dx.scalar_type() == at::kFloat);
      REQUIRE(mine.dw.scalar_type() == at::kFloat);
      // Each row's loss is off by at most the rounding of its largest probability: 2^-9 relative.
      const double loss_error = std::abs(mine.loss.item<double>() - exact.loss.item<double>());
      const double torch_loss_error = std::abs(torch_bf16.loss.item<double>() - exact.loss.item<double>());
      REQUIRE(loss_error <= torch_loss_error + std::ldexp(1.0, -9));
      REQUIRE(relative_error(mine.dx, exact.dx) <= 1.5 * relative_error(torch_bf16.dx, exact.dx) + 1e-4);
      REQUIRE(relative_error(mine.dw, exact.dw) <= 1.5 * relative_error(torch_bf16.dw, exact.dw) + 1e-4);
    }
  }
}

TEST_CASE("the fused classifier's loss stays finite and right where the target's probability underflows",
          "[train][fused]") {
  torch::manual_seed(12);
  const int64_t rows = 8, width = 4, vocab = 10;
  // Logits hundreds apart: exp(-200) is 0 in fp32, so -log(p[target]) would be infinite.
  const at::Tensor x = torch::randn({rows, width}) * 100, w = torch::randn({vocab, width});
  const at::Tensor targets = std::get<1>(at::min(at::linear(x, w), 1));  // each row's least likely token
  const ClassifierRun exact = reference_classifier(x.to(torch::kDouble), w.to(torch::kDouble), targets, at::kDouble);
  REQUIRE(exact.loss.item<double>() > 100);
  const ClassifierRun mine = fused_classifier(x, w, targets, at::kFloat, dtl::train::kClassifierChunk);
  REQUIRE(std::isfinite(mine.loss.item<double>()));
  REQUIRE(std::abs(mine.loss.item<double>() - exact.loss.item<double>()) < 1e-5 * exact.loss.item<double>());
  REQUIRE(relative_error(mine.dx, exact.dx) < 1e-5);
}
