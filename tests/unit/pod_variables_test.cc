// dtlaunch as a Kubeflow pod's command: the exact variables each operator gives its pods
// (docs/kubernetes.md lists them, with the operator's source lines), and the one set it refuses.
#include <catch2/catch.hpp>
#include <map>

#include "config/pod_variables.h"
#include "fake_env.h"

using namespace dtl::config;

namespace {

using Vars = std::map<std::string, std::string>;

ParseResult parse(std::vector<std::string> args, const Vars& env) {
  args.push_back("train.py");
  return parse_command_line(args, dtl::test::env_of(env), dtl::test::files_of({}));
}

LaunchOptions ok(const Vars& env, std::vector<std::string> args = {}) {
  auto r = parse(std::move(args), env);
  INFO((r ? "" : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

std::string refused(const Vars& env, std::vector<std::string> args = {}) {
  auto r = parse(std::move(args), env);
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  return r.error().message;
}

/// PyTorchJob (training operator v1.7-v1.9), Master + 1 Worker, no elasticPolicy: the worker's pod.
const Vars kWorkerPod = {
    {"PYTHONUNBUFFERED", "1"},        {"MASTER_PORT", "23456"},     {"PET_MASTER_PORT", "23456"},
    {"MASTER_ADDR", "job-master-0"}, {"PET_MASTER_ADDR", "job-master-0"}, {"WORLD_SIZE", "2"},
    {"RANK", "1"},                    {"PET_NODE_RANK", "1"},       {"PET_NPROC_PER_NODE", "auto"},
    {"PET_NNODES", "2"}};

/// The same job under a training operator before v1.7: no PET_* at all.
const Vars kOldWorkerPod = {{"PYTHONUNBUFFERED", "1"}, {"MASTER_PORT", "23456"}, {"MASTER_ADDR", "job-master-0"},
                            {"WORLD_SIZE", "2"},       {"RANK", "1"}};

}  // namespace

TEST_CASE("a PyTorchJob worker pod's PET variables give nnodes, node_rank and the master") {
  auto o = ok(kWorkerPod);
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.master_addr == "job-master-0");
  CHECK(o.master_port == 23456);
  CHECK(o.nproc_per_node.kind == NprocSpec::Kind::auto_);
  CHECK(o.rdzv_backend == "static");
}

TEST_CASE("WORLD_SIZE and RANK counting pods, without PET_NNODES and PET_NODE_RANK, are refused with the flags to pass") {
  CHECK(refused(kOldWorkerPod) ==
        "WORLD_SIZE=2, RANK=1, MASTER_ADDR and MASTER_PORT are set (a PyTorchJob pod without PET_NNODES and "
        "PET_NODE_RANK, where they count pods, not processes) but not nnodes, node_rank, master_addr, master_port: "
        "dtlaunch does not guess; pass --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
        "--master_port=$MASTER_PORT (in a manifest's args, $(WORLD_SIZE)...; see docs/kubernetes.md)");
}

TEST_CASE("a launcher's worker starting a launch of its own is no pod: its WORLD_SIZE counts processes") {
  Vars worker = kOldWorkerPod;
  worker["TORCHELASTIC_RUN_ID"] = "none";
  CHECK(ok(worker).max_nodes == 1);
}

TEST_CASE("the refusal names only the settings that are missing") {
  auto why = refused(kOldWorkerPod, {"--nnodes=2", "--node_rank=1"});
  CHECK_THAT(why, Catch::Contains("but not master_addr, master_port: dtlaunch does not guess; pass "
                                  "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT ("));
  Vars pet = kOldWorkerPod;
  pet["PET_NNODES"] = "2";
  CHECK_THAT(refused(pet), Catch::Contains("but not node_rank, master_addr, master_port:"));
}

TEST_CASE("with the flags given, the old operator's pod launches as one node per pod") {
  auto o = ok(kOldWorkerPod, {"--nnodes=2", "--node_rank=1", "--master_addr=job-master-0", "--master_port=23456"});
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.master_port == 23456);
}

TEST_CASE("a single node, --standalone or an elastic rendezvous with nnodes given need nothing more") {
  CHECK(ok(kOldWorkerPod, {"--nnodes=1"}).max_nodes == 1);
  CHECK(ok(kOldWorkerPod, {"--standalone"}).standalone);
  Vars elastic = kOldWorkerPod;  // an elasticPolicy beside a Master replica: ranks come from the rendezvous
  elastic.insert({{"PET_RDZV_ENDPOINT", "job-worker-0:23456"}, {"PET_RDZV_BACKEND", "c10d"}, {"PET_NNODES", "1:3"}});
  auto o = ok(elastic);
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 3);
}

TEST_CASE("WORLD_SIZE and RANK alone, without a master, are not a pod's set and are left alone") {
  CHECK(ok({{"WORLD_SIZE", "2"}, {"RANK", "1"}}).max_nodes == 1);
}

TEST_CASE("a PyTorchJob elastic worker pod gives the c10d rendezvous, its range and its settings") {
  auto o = ok({{"PYTHONUNBUFFERED", "1"},
               {"PET_RDZV_ENDPOINT", "job-worker-0:23456"},
               {"PET_RDZV_BACKEND", "c10d"},
               {"PET_NNODES", "1:2"},
               {"PET_MAX_RESTARTS", "100"},
               {"PET_RDZV_ID", "job"},
               {"PET_RDZV_CONF", "join_timeout=900,last_call_timeout=10"},
               {"PET_NPROC_PER_NODE", "auto"}});
  CHECK(o.rdzv_backend == "c10d");
  CHECK(o.rdzv_endpoint == "job-worker-0:23456");
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 2);
  CHECK(o.max_restarts == 100);
  CHECK(o.run_id == "job");
  CHECK(o.rdzv_conf.join_timeout_s == 900);
  CHECK(o.rdzv_conf.last_call_timeout_s == 10);
}

TEST_CASE("the operator's empty PET_STANDALONE (standalone: true) is refused, as torchrun fails on it") {
  CHECK(refused({{"PET_STANDALONE", ""}}) ==
        "PET_STANDALONE is set but empty (a PyTorchJob's elasticPolicy.standalone: true, on which torchrun fails "
        "too): set it to 1 or 0, or pass --standalone");
  CHECK(ok({{"PET_STANDALONE", ""}}, {"--standalone"}).standalone);
  CHECK_FALSE(ok({{"PET_STANDALONE", "0"}}).standalone);
}

TEST_CASE("a TrainJob node's PET variables give nnodes, node_rank and the master") {
  for (const char* nproc : {"auto", "cpu", "gpu", "4"}) {
    auto o = ok({{"PET_NNODES", "3"},
                 {"PET_NPROC_PER_NODE", nproc},
                 {"PET_NODE_RANK", "2"},
                 {"PET_MASTER_ADDR", "job-node-0-0.job"},
                 {"PET_MASTER_PORT", "29500"},
                 {"JOB_COMPLETION_INDEX", "2"}});
    CHECK(o.max_nodes == 3);
    CHECK(o.node_rank == 2);
    CHECK(o.master_addr == "job-node-0-0.job");
    CHECK(o.master_port == 29500);
  }
}
