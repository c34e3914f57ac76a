// dtl-train's fused CPU GELU and causal attention against the torch ops they replace: values and
// gradients, over shapes that leave partial vectors and partial attention blocks, and with NaN.
// REQUIRE, not CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <torch/types.h>
#include <torch/utils.h>

#include "blas.h"
#include "cpu_kernels.h"
#include "fused_ops.h"

using dtl::train::fused_attention_usable;
using dtl::train::fused_causal_attention;
using dtl::train::fused_gelu_tanh;
using dtl::train::fused_gelu_usable;

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
