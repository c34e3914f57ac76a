#include <catch2/catch.hpp>

#include "node/gpus.h"

using namespace dtl::node;

namespace {

std::vector<Gpu> four() {
  return {{0, "GPU-aaaa-1", "H200"}, {1, "GPU-bbbb-2", "H200"}, {2, "GPU-cccc-3", "H200"}, {3, "GPU-cddd-4", "H200"}};
}

std::vector<std::string> chosen(const dtl::Result<std::vector<std::string>>& s) {
  if (!s) FAIL(s.error().message);
  return *s;
}

std::string refused(const dtl::Result<std::vector<std::string>>& s) {
  REQUIRE_FALSE(s);
  CHECK(s.error().exit_code == 2);
  return s.error().message;
}

}  // namespace

TEST_CASE("nvidia-smi -L lines are parsed") {
  auto gpus = parse_nvidia_smi_list({"GPU 0: NVIDIA H200 (UUID: GPU-5f3c1b2a-1111-2222-3333-444455556666)",
                                     "GPU 1: NVIDIA H200 (UUID: GPU-6f3c1b2a-1111-2222-3333-444455556666)",
                                     "  MIG 1g.18gb     Device  0: (UUID: MIG-abc)", "No devices were found"});
  REQUIRE(gpus.size() == 2);
  CHECK(gpus[1].index == 1);
  CHECK(gpus[1].name == "NVIDIA H200");
  CHECK(gpus[1].uuid == "GPU-6f3c1b2a-1111-2222-3333-444455556666");
}

TEST_CASE("without CUDA_VISIBLE_DEVICES every GPU is visible by index") {
  CHECK(chosen(select_gpus(four(), std::nullopt, std::nullopt)) == std::vector<std::string>{"0", "1", "2", "3"});
}

TEST_CASE("an inherited CUDA_VISIBLE_DEVICES narrows by index or UUID prefix, and gpu_ids index into it") {
  CHECK(chosen(select_gpus(four(), "2,0", std::nullopt)) == std::vector<std::string>{"2", "0"});
  CHECK(chosen(select_gpus(four(), "GPU-bbbb,GPU-aaaa-1", std::nullopt)) ==
        std::vector<std::string>{"GPU-bbbb", "GPU-aaaa-1"});
  CHECK(chosen(select_gpus(four(), "3,1", std::vector<int>{1})) == std::vector<std::string>{"1"});
  CHECK(chosen(select_gpus(four(), "", std::nullopt)).empty());
  CHECK(chosen(select_gpus(four(), "1,-1,2", std::nullopt)) == std::vector<std::string>{"1"});
}

TEST_CASE("impossible GPU selections are explained") {
  CHECK(refused(select_gpus(four(), "7", std::nullopt)) == "CUDA_VISIBLE_DEVICES=7: no GPU 7 on this machine (4 found)");
  CHECK(refused(select_gpus(four(), "GPU-c", std::nullopt)) == "CUDA_VISIBLE_DEVICES=GPU-c: 'GPU-c' matches several GPUs");
  CHECK(refused(select_gpus(four(), "abc", std::nullopt)) ==
        "CUDA_VISIBLE_DEVICES=abc: 'abc' is neither a GPU index nor a UUID");
  CHECK(refused(select_gpus(four(), "0,1", std::vector<int>{2})) == "--gpu_ids: GPU 2 is not visible (visible: 0,1)");
  CHECK(refused(select_gpus(four(), "0,1", std::vector<int>{5}, "cfg.yaml:1:10: gpu_ids")) ==
        "cfg.yaml:1:10: gpu_ids: GPU 5 is not visible (visible: 0,1)");
}

TEST_CASE("fake GPUs are numbered from 0") {
  auto inv = discover_gpus(3);
  CHECK(inv.source == "fake");
  REQUIRE(inv.gpus.size() == 3);
  CHECK(inv.gpus[2].index == 2);
}
