// ZeRO's optimizer on a two-rank Gloo group (two threads, one in-memory store). With offload its
// AdamW state and step live in host memory, behind copies of the gradient chunks in and of the
// parameter chunks out, before the all-gather sends them to the other rank. On a CPU those copies
// are host to host, so the same steps must give the same bits, and so must a run that saves its
// shard and resumes from it.
// REQUIRE, not CHECK: libtorch's logging headers (glog) redefine CHECK.
#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "comm.h"
#include "zero.h"

using namespace dtl::train;

namespace {

const std::vector<std::vector<int64_t>> kShapes{{37, 29}, {101}, {3, 5, 7}, {600}};
const std::vector<bool> kDecay{true, false, true, false};

/// Drawn once, before the ranks' threads start: they would share the default generator.
const std::vector<at::Tensor>& initial_parameters() {
  static const std::vector<at::Tensor> values = [] {
    torch::manual_seed(7);
    std::vector<at::Tensor> out;
    for (const auto& shape : kShapes) out.push_back(torch::randn(shape));
    return out;
  }();
  return values;
}

/// One rank's training state: its parameters, the reducer, stage 3's shards and ZeRO's AdamW.
struct Rank {
  std::vector<at::Tensor> params;
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<ShardedParameters> shards;
  std::unique_ptr<ShardedAdamW> adamw;

  Rank(Comm& comm, int stage, bool offload, const std::vector<at::Tensor>& values) {
    for (const auto& v : values) params.push_back(v.clone().requires_grad_());
    // Stage 3 as dtl-train cuts it: explicit buckets (here two), gathered before use.
    const std::vector<std::vector<size_t>> buckets =
        stage == 3 ? std::vector<std::vector<size_t>>{{3, 2}, {1, 0}} : std::vector<std::vector<size_t>>{};
    reducer = std::make_unique<Reducer>(comm, params, std::vector<std::string>{"a", "b", "c", "d"},
                                        /*bucket_bytes=*/2048, false, stage, buckets);
    if (stage == 3) shards = std::make_unique<ShardedParameters>(comm, *reducer, params, std::vector<size_t>{}, 0);
    adamw = std::make_unique<ShardedAdamW>(comm, *reducer, params, kDecay, 0.1, 3e-3, 0.9, 0.95, shards.get(), offload);
  }

  /// `n` steps of a loss whose gradients depend on the parameters and differ between the ranks,
  /// with the gradient norm clipped (so a grad scale reaches the step).
  void steps(int rank, int n) {
    for (int step = 0; step < n; ++step) {
      if (shards) shards->gather_all();
      reducer->prepare(true);
      at::Tensor loss = torch::zeros({});
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor input = torch::full(kShapes[i], 0.5 + rank);
        loss = loss + (params[i] * input).sum() + params[i].square().sum();
      }
      loss.backward();
      reducer->end_micro_batch();
      reducer->finish(/*max_norm=*/1.0);
      adamw->step(reducer->clip_scale());
      reducer->zero_grad();
      if (shards) shards->release_all();
    }
  }

  std::vector<at::Tensor> values() {
    if (shards) shards->gather_all();
    std::vector<at::Tensor> out;
    for (const auto& p : params) out.push_back(p.detach().clone());
    if (shards) shards->release_all();
    return out;
  }
};

struct Outcome {
  std::vector<at::Tensor> kept, offloaded, resumed;  ///< the parameters after 5 steps
  bool offloaded_says_so = false;
  size_t kept_state = 0, offloaded_state = 0;
};

/// Rank `rank`'s three runs at `stage`: 5 steps with the state on the parameters' device, 5 with it
/// offloaded, and 3 offloaded, the shard saved, a new optimizer loading it and 2 more steps.
Outcome run_rank(Comm& comm, int stage) {
  Outcome out;
  {
    Rank r(comm, stage, false, initial_parameters());
    r.steps(comm.rank, 5);
    out.kept = r.values();
    out.kept_state = r.adamw->state_bytes();
  }
  {
    Rank r(comm, stage, true, initial_parameters());
    r.steps(comm.rank, 5);
    out.offloaded = r.values();
    out.offloaded_state = r.adamw->state_bytes();
    out.offloaded_says_so = r.adamw->offloaded();
  }
  std::stringstream shard;
  std::vector<at::Tensor> saved;
  {
    Rank r(comm, stage, true, initial_parameters());
    r.steps(comm.rank, 3);
    torch::serialize::OutputArchive archive;
    r.adamw->save(archive);
    archive.save_to(shard);
    saved = r.values();
  }
  Rank r(comm, stage, true, saved);
  torch::serialize::InputArchive archive;
  archive.load_from(shard);
  r.adamw->load(archive);
  r.steps(comm.rank, 2);
  out.resumed = r.values();
  return out;
}

void require_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(torch::equal(a[i], b[i]));
  }
}

}  // namespace

TEST_CASE("ZeRO's optimizer with its state offloaded to host memory steps and resumes to the same bits") {
  initial_parameters();
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    auto store = c10::make_intrusive<c10d::HashStore>();
    Outcome outcomes[2];
    std::exception_ptr errors[2];
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        try {
          LaunchEnv env;
          env.rank = rank;
          env.world_size = 2;
          auto comm = form_group(store, env, "gloo", c10::kCPU, std::chrono::seconds(60));
          outcomes[rank] = run_rank(*comm, stage);
        } catch (...) {
          errors[rank] = std::current_exception();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    for (const Outcome& o : outcomes) {
      REQUIRE(o.offloaded_says_so);
      REQUIRE(o.kept_state > 0);
      REQUIRE(o.offloaded_state == o.kept_state);
      require_equal(o.offloaded, o.kept);
      require_equal(o.resumed, o.kept);
    }
    require_equal(outcomes[1].kept, outcomes[0].kept);  // every rank has every parameter
  }
}
