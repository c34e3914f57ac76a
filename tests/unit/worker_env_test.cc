#include <catch2/catch.hpp>

#include <map>

#include "config/flags.h"
#include "launcher/worker_env.h"

using namespace dtl::launcher;

namespace {

std::map<std::string, std::string> as_map(const dtl::EnvPairs& pairs) { return {pairs.begin(), pairs.end()}; }

dtl::EnvLookup none() {
  return [](const std::string&) { return std::optional<std::string>(); };
}

}  // namespace

TEST_CASE("ranks are the node's base rank plus the local rank") {
  GroupEnv g;
  g.base_rank = 4;
  g.world_size = 8;
  g.local_world_size = 4;
  g.group_rank = 1;
  g.group_world_size = 2;
  auto env = as_map(worker_env(g, WorkerSlot{2, "/x/error.json", std::nullopt}, none()));
  CHECK(env["RANK"] == "6");
  CHECK(env["LOCAL_RANK"] == "2");
  CHECK(env["ROLE_RANK"] == "6");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["TORCHELASTIC_ERROR_FILE"] == "/x/error.json");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
  g.agent_store = true;
  CHECK(as_map(worker_env(g, WorkerSlot{}, none()))["TORCHELASTIC_USE_AGENT_STORE"] == "True");
}

TEST_CASE("OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING default only when not inherited") {
  auto env = as_map(worker_env(GroupEnv{}, WorkerSlot{}, none()));
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  auto inherited = [](const std::string& k) {
    return k == "OMP_NUM_THREADS" || k == "TORCH_NCCL_ASYNC_ERROR_HANDLING" ? std::optional<std::string>("8")
                                                                           : std::nullopt;
  };
  auto env2 = as_map(worker_env(GroupEnv{}, WorkerSlot{}, inherited));
  CHECK(env2.count("OMP_NUM_THREADS") == 0);
  CHECK(env2.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0);
}

TEST_CASE("deepspeed's launcher variables, PYTORCH_NVML_BASED_CUDA_CHECK as its import sets it") {
  GroupEnv g;
  g.local_world_size = 2;
  g.group_rank = 1;
  g.group_world_size = 3;
  CHECK(as_map(worker_env(g, WorkerSlot{}, none())).count("CROSS_RANK") == 0);
  g.deepspeed_variables = true;
  auto env = as_map(worker_env(g, WorkerSlot{}, none()));
  CHECK(env["CROSS_RANK"] == "1");
  CHECK(env["CROSS_SIZE"] == "3");
  CHECK(env["LOCAL_SIZE"] == "2");
  CHECK(env["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1");
  auto inherited = [](const std::string& k) {
    return k == "PYTORCH_NVML_BASED_CUDA_CHECK" ? std::optional<std::string>("0") : std::nullopt;
  };
  CHECK(as_map(worker_env(g, WorkerSlot{}, inherited)).count("PYTORCH_NVML_BASED_CUDA_CHECK") == 0);  // setdefault
}

TEST_CASE("the overlay replaces inherited values and keeps the rest") {
  char a[] = "PATH=/bin", b[] = "RANK=99", c[] = "WEIRD";
  char* inherited[] = {a, b, c, nullptr};
  auto merged = merge_environ(inherited, {{"RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}});
  CHECK(merged == std::vector<std::string>{"PATH=/bin", "RANK=1", "CUDA_VISIBLE_DEVICES=3"});
}

TEST_CASE("the plan's variables reach the workers as if inherited, and torchrun's own win over them") {
  GroupEnv g;
  g.variables = {{"NCCL_DEBUG", "INFO"}, {"OMP_NUM_THREADS", "4"}, {"MASTER_PORT", "1"}};
  auto pairs = worker_env(g, WorkerSlot{}, none());
  auto env = as_map(pairs);
  CHECK(env["NCCL_DEBUG"] == "INFO");
  CHECK(env["OMP_NUM_THREADS"] == "4");  // set by the file: not dtlaunch's default of 1
  CHECK(env["MASTER_PORT"] == "29500");
  CHECK(env.size() == pairs.size());  // each variable once
}

TEST_CASE("dtlaunch's secrets are withheld from the workers, whatever else they inherit") {
  char a[] = "PATH=/bin", b[] = "DTLAUNCH_RDZV_TOKEN=s3cret", c[] = "PET_RDZV_TOKEN=s3cret", d[] = "PET_NNODES=2";
  char* inherited[] = {a, b, c, d, nullptr};
  auto merged = merge_environ(inherited, {{"RANK", "1"}}, dtl::config::secret_variables());
  CHECK(merged == std::vector<std::string>{"PATH=/bin", "PET_NNODES=2", "RANK=1"});
}
