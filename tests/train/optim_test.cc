// dtl-train's fused AdamW against torch::optim::AdamW, and its state through a save/load round trip.
// Links libtorch, so it is in an executable of its own (unit_tests stays torch-free). REQUIRE, not
// CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <sstream>

#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include "optim.h"

using dtl::train::FusedAdamW;

namespace {

/// Parameters of both weight-decay groups: matrices (decayed), a vector and an odd-sized vector
/// (not decayed; sizes that leave a partial vector at the end of the fused loop).
struct Params {
  std::vector<at::Tensor> decay, no_decay;
  std::vector<at::Tensor> all() const {
    auto a = decay;
    a.insert(a.end(), no_decay.begin(), no_decay.end());
    return a;
  }
};

Params make_params(uint64_t seed) {
  torch::manual_seed(seed);
  Params p;
  p.decay = {torch::randn({37, 29}).requires_grad_(), torch::randn({3, 5, 7}).requires_grad_()};
  p.no_decay = {torch::randn({101}).requires_grad_(), torch::randn({3}).requires_grad_(),
                torch::randn({70000}).requires_grad_()};  // > one parallel_for grain
  return p;
}

Params clone(const Params& p) {
  Params c;
  for (const auto& t : p.decay) c.decay.push_back(t.detach().clone().requires_grad_());
  for (const auto& t : p.no_decay) c.no_decay.push_back(t.detach().clone().requires_grad_());
  return c;
}

/// The same random gradients into each set of parameters.
void set_grads(uint64_t seed, const std::vector<std::vector<at::Tensor>>& sets) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> grads;
  for (const auto& p : sets.front()) grads.push_back(torch::randn_like(p) * 0.1);
  for (const auto& set : sets) {
    for (size_t i = 0; i < set.size(); ++i) set[i].mutable_grad() = grads[i].clone();
  }
}

const double kLr = 3e-3, kBeta1 = 0.9, kBeta2 = 0.95, kDecay = 0.1;

double lr_at(int step) { return kLr * (1.0 - 0.1 * step); }  // changes every step, as a schedule does

FusedAdamW make_fused(const Params& p) {
  return FusedAdamW({{p.decay, kDecay}, {p.no_decay, 0.0}}, kLr, kBeta1, kBeta2, 1e-8);
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i].detach(), b[i].detach())) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("fused AdamW takes torch::optim::AdamW's steps", "[train][optim]") {
  Params mine = make_params(1), ref = clone(mine), start = clone(mine);
  FusedAdamW fused = make_fused(mine);
  auto options = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(1e-8).weight_decay(wd));
  };
  torch::optim::AdamW torch_adamw({torch::optim::OptimizerParamGroup(ref.decay, options(kDecay)),
                                   torch::optim::OptimizerParamGroup(ref.no_decay, options(0.0))});
  for (int step = 0; step < 6; ++step) {
    set_grads(100 + step, {mine.all(), ref.all()});
    fused.set_lr(lr_at(step));
    for (auto& g : torch_adamw.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr_at(step));
    fused.step();
    torch_adamw.step();
  }
  const auto a = mine.all(), b = ref.all(), s = start.all();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    // The parameters moved (by ~6 * lr) and agree to float rounding.
    REQUIRE((a[i] - s[i]).abs().max().item<double>() > 1e-3);
    const double err = ((a[i] - b[i]).abs() / b[i].abs().clamp_min(1e-3)).max().item<double>();
    REQUIRE(err < 1e-6);
  }
  for (size_t gi = 0; gi < 2; ++gi) {
    for (size_t pi = 0; pi < (gi == 0 ? mine.decay : mine.no_decay).size(); ++pi) REQUIRE(fused.state(gi, pi).step == 6);
  }
}

TEST_CASE("fused AdamW with a gradient scale takes the steps of the scaled gradients", "[train][optim]") {
  Params scaled = make_params(7), prescaled = clone(scaled);
  FusedAdamW a = make_fused(scaled), b = make_fused(prescaled);
  const at::Tensor scale = torch::tensor(0.37f);
  for (int step = 0; step < 3; ++step) {
    set_grads(200 + step, {scaled.all(), prescaled.all()});
    for (const auto& p : prescaled.all()) p.mutable_grad().mul_(scale);
    a.step(scale);
    b.step();
  }
  REQUIRE(same(scaled.all(), prescaled.all()));
  // And on torch's ops, which take what the fused loop does not (here: double parameters).
  const Params floats = make_params(8);
  Params d1;
  for (const auto& t : floats.decay) d1.decay.push_back(t.detach().to(torch::kDouble).requires_grad_());
  for (const auto& t : floats.no_decay) d1.no_decay.push_back(t.detach().to(torch::kDouble).requires_grad_());
  Params d2 = clone(d1);
  FusedAdamW c = make_fused(d1), d = make_fused(d2);
  set_grads(300, {d1.all(), d2.all()});
  for (const auto& p : d2.all()) p.mutable_grad().mul_(scale);
  c.step(scale);
  d.step();
  REQUIRE(same(d1.all(), d2.all()));
}

TEST_CASE("torch's multi-tensor AdamW kernel, as dtl-train runs it on CUDA, takes torch::optim::AdamW's steps",
          "[train][optim]") {
  if (!FusedAdamW::has_multi_tensor_kernel()) {
    WARN("libtorch " << TORCH_VERSION << " has no multi-tensor AdamW kernel (2.2+): nothing to check");
    return;
  }
  // On CPU (libtorch 2.4+ has the kernel for CPU too), with a gradient scale as clipping passes it.
  Params mine = make_params(9), ref = clone(mine);
  FusedAdamW multi({{mine.decay, kDecay}, {mine.no_decay, 0.0}}, kLr, kBeta1, kBeta2, 1e-8, /*multi_tensor_on_cpu=*/true);
  FusedAdamW plain = make_fused(ref);
  const at::Tensor scale = torch::tensor(0.37f);  // its reciprocal is inexact: the kernel divides by it
  for (int step = 0; step < 4; ++step) {
    set_grads(400 + step, {mine.all(), ref.all()});
    multi.set_lr(lr_at(step));
    plain.set_lr(lr_at(step));
    multi.step(scale);
    plain.step(scale);
  }
  const auto a = mine.all(), b = ref.all();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    // torch's kernel rounds differently (its first moment is a lerp): 1.2e-6 seen with libtorch 2.15.
    REQUIRE(((a[i] - b[i]).abs() / b[i].abs().clamp_min(1e-3)).max().item<double>() < 5e-6);
  }
  REQUIRE(multi.state(0, 0).step == 4);
  REQUIRE(multi.state(0, 0).device_step.item<float>() == 4.0f);
}

TEST_CASE("fused AdamW without weight decay on a group leaves that group undecayed", "[train][optim]") {
  // A zero gradient: Adam's step is 0, so only the decay moves parameters.
  Params p = make_params(2), start = clone(p);
  FusedAdamW fused = make_fused(p);
  for (const auto& t : p.all()) t.mutable_grad() = torch::zeros_like(t);
  fused.step();
  for (size_t i = 0; i < p.no_decay.size(); ++i) REQUIRE(torch::equal(p.no_decay[i].detach(), start.no_decay[i]));
  for (size_t i = 0; i < p.decay.size(); ++i) {
    REQUIRE(torch::allclose(p.decay[i].detach(), start.decay[i] * (1 - kLr * kDecay), 1e-6, 1e-7));
  }
}

TEST_CASE("fused AdamW's state survives a save/load round trip exactly", "[train][optim]") {
  Params a = make_params(3), b = clone(a);
  FusedAdamW first = make_fused(a);
  for (int step = 0; step < 3; ++step) {
    set_grads(200 + step, {a.all()});
    first.set_lr(lr_at(step));
    first.step();
  }
  torch::serialize::OutputArchive out;
  first.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  // A second optimizer over a copy of the parameters, loaded from the bytes, takes the same steps.
  for (size_t i = 0; i < a.all().size(); ++i) b.all()[i].detach().copy_(a.all()[i].detach());
  FusedAdamW second = make_fused(b);
  torch::serialize::InputArchive in;
  std::istringstream input(bytes.str());
  in.load_from(input);
  second.load(in);
  for (int step = 3; step < 6; ++step) {
    set_grads(200 + step, {a.all(), b.all()});
    first.set_lr(lr_at(step));
    second.set_lr(lr_at(step));
    first.step();
    second.step();
  }
  REQUIRE(same(a.all(), b.all()));
  REQUIRE(second.state(0, 0).step == 6);
}

TEST_CASE("fused AdamW refuses another optimizer's state", "[train][optim]") {
  Params p = make_params(4);
  FusedAdamW fused = make_fused(p);
  torch::serialize::OutputArchive out;
  out.write("something", c10::IValue(int64_t{1}));
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream input(bytes.str());
  in.load_from(input);
  REQUIRE_THROWS_WITH(fused.load(in), Catch::Contains("not dtl-train's fused AdamW"));
}

// Not run by default: `train_torch_tests "[bench]"` times one step of each optimizer over
// dtl-train's default preset's parameter count (10.8M, in tensors of its sizes).
TEST_CASE("fused AdamW step time against torch::optim::AdamW", "[.][bench]") {
  auto make = [] {
    torch::manual_seed(5);
    Params p;
    for (int layer = 0; layer < 6; ++layer) {
      for (auto shape : std::vector<std::vector<int64_t>>{{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}}) {
        p.decay.push_back(torch::randn(shape).requires_grad_());
      }
      for (int64_t n : {384, 384, 1152, 384, 384, 384, 1536, 384}) p.no_decay.push_back(torch::randn({n}).requires_grad_());
    }
    p.decay.push_back(torch::randn({256, 384}).requires_grad_());
    p.decay.push_back(torch::randn({128, 384}).requires_grad_());
    return p;
  };
  Params mine = make(), ref = make();
  FusedAdamW fused = make_fused(mine);
  torch::optim::AdamW torch_adamw(
      {torch::optim::OptimizerParamGroup(ref.decay,
                                         std::make_unique<torch::optim::AdamWOptions>(
                                             torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).weight_decay(kDecay))),
       torch::optim::OptimizerParamGroup(ref.no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                                           torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).weight_decay(0)))});
  set_grads(7, {mine.all(), ref.all()});
  auto time = [](auto&& f) {
    double best = 1e9;
    for (int i = 0; i < 8; ++i) {
      const auto t = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    return best;
  };
  const double fused_s = time([&] { fused.step(); }), torch_s = time([&] { torch_adamw.step(); });
  WARN("AdamW step, best of 8: fused " << fused_s * 1e3 << " ms, torch::optim::AdamW " << torch_s * 1e3 << " ms");
}
