// ZeRO's optimizer on a one-rank Gloo group (an in-memory store): with offload its AdamW state and
// step live in host memory, behind copies of the gradient chunks in and of the parameter chunks
// out. On a CPU those copies are host to host, so the same steps must give the same bits.
// REQUIRE, not CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>
#include <torch/utils.h>

#include "comm.h"
#include "zero.h"

using namespace dtl::train;

namespace {

struct Run {
  std::vector<at::Tensor> params;
  size_t state_bytes = 0;
  bool offloaded = false;
};

/// Five steps of a loss whose gradients depend on the parameters, through the reducer and ZeRO's
/// optimizer at `stage`, with the gradient norm clipped (so a grad scale reaches the step).
Run train(Comm& comm, int stage, bool offload) {
  torch::manual_seed(7);
  std::vector<at::Tensor> params{torch::randn({37, 29}).requires_grad_(), torch::randn({101}).requires_grad_(),
                                 torch::randn({3, 5, 7}).requires_grad_(), torch::randn({600}).requires_grad_()};
  std::vector<at::Tensor> inputs;  // before stage 3 empties the parameters
  for (const auto& p : params) inputs.push_back(torch::randn(p.sizes()));
  const std::vector<std::string> names{"a", "b", "c", "d"};
  const std::vector<bool> decay{true, false, true, false};
  // Stage 3 as dtl-train cuts it: explicit buckets (here two), gathered before use.
  const std::vector<std::vector<size_t>> buckets =
      stage == 3 ? std::vector<std::vector<size_t>>{{3, 2}, {1, 0}} : std::vector<std::vector<size_t>>{};
  Reducer reducer(comm, params, names, /*bucket_bytes=*/2048, false, stage, buckets);
  std::unique_ptr<ShardedParameters> shards;
  if (stage == 3) shards = std::make_unique<ShardedParameters>(comm, reducer, params, std::vector<size_t>{}, 0);
  ShardedAdamW adamw(comm, reducer, params, decay, 0.1, 3e-3, 0.9, 0.95, shards.get(), offload);
  for (int step = 0; step < 5; ++step) {
    if (shards) shards->gather_all();
    reducer.prepare(true);
    at::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * inputs[i]).sum() + params[i].square().sum();
    loss.backward();
    reducer.end_micro_batch();
    reducer.finish(/*max_norm=*/1.0);
    adamw.step(reducer.clip_scale());
    reducer.zero_grad();
    if (shards) shards->release_all();
  }
  Run run;
  if (shards) shards->gather_all();
  for (const auto& p : params) run.params.push_back(p.detach().clone());
  run.state_bytes = adamw.state_bytes();
  run.offloaded = adamw.offloaded();
  return run;
}

}  // namespace

TEST_CASE("ZeRO's optimizer with its state offloaded to host memory steps to the same bits, at every stage") {
  LaunchEnv env;  // no MASTER_PORT: one rank, an in-memory store
  auto comm = connect(env, "gloo", c10::kCPU, std::chrono::seconds(30));
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    const Run kept = train(*comm, stage, false);
    const Run offloaded = train(*comm, stage, true);
    REQUIRE_FALSE(kept.offloaded);
    REQUIRE(offloaded.offloaded);
    REQUIRE(offloaded.state_bytes == kept.state_bytes);
    REQUIRE(kept.state_bytes > 0);
    for (size_t i = 0; i < kept.params.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(torch::equal(kept.params[i], offloaded.params[i]));
    }
  }
}
