#include <catch2/catch.hpp>
#include <map>

#include "config/cluster_env.h"
#include "fake_env.h"
#include "fanout/slurm_launch.h"

using namespace dtl::config;
using dtl::test::env_of;
using Vars = std::map<std::string, std::string>;

namespace {

/// What srun 22.05 sets in `srun -N3 --ntasks-per-node=1` on the job's second node (recorded on a
/// real cluster; see e2e/test_slurm.py).
Vars srun_step(Vars changes = {}) {
  Vars v{{"SLURM_JOB_ID", "12345"},           {"SLURM_JOBID", "12345"},         {"SLURM_STEP_ID", "0"},
         {"SLURM_STEPID", "0"},               {"SLURM_NNODES", "4"},            {"SLURM_JOB_NUM_NODES", "4"},
         {"SLURM_JOB_NODELIST", "gpu[01-03],cpu5"}, {"SLURM_STEP_NODELIST", "gpu[02-03],cpu5"},
         {"SLURM_STEP_NUM_NODES", "3"},       {"SLURM_STEP_NUM_TASKS", "3"},    {"SLURM_NTASKS", "3"},
         {"SLURM_NODEID", "1"},               {"SLURM_PROCID", "1"},            {"SLURM_LOCALID", "0"},
         {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}};
  for (const auto& [k, val] : changes) {
    if (val.empty()) {
      v.erase(k);
    } else {
      v[k] = val;
    }
  }
  return v;
}

ParseResult parse(std::vector<std::string> args, const Vars& env) {
  return parse_command_line(args, env_of(env), dtl::test::files_of({}));
}

LaunchOptions ok(std::vector<std::string> args, const Vars& env) {
  auto r = parse(std::move(args), env);
  INFO((r ? "" : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

}  // namespace

TEST_CASE("an srun step gives the step's nodes, the node id, the first host, a port and a run id") {
  auto d = detect_cluster(env_of(srun_step()));
  CHECK(d.scheduler == "Slurm");
  CHECK(d.values.at(Setting::nnodes).text == "3");  // the step's, not the job's 4
  CHECK(d.values.at(Setting::nnodes).variable == "SLURM_STEP_NUM_NODES");
  CHECK(d.values.at(Setting::node_rank).text == "1");
  CHECK(d.values.at(Setting::node_rank).variable == "SLURM_NODEID");
  CHECK(d.values.at(Setting::master_addr).text == "gpu02");
  CHECK(d.values.at(Setting::master_port).text == "12345");  // 10000 + 12345 % 10000
  CHECK(d.values.at(Setting::rdzv_id).text == "12345.0");
  CHECK(slurm_job_port(7) == 10007);
  CHECK(slurm_job_port(1234567) == 14567);
}

TEST_CASE("a one-node step keeps one node's defaults for the store's address and port") {
  auto d = detect_cluster(env_of(srun_step({{"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_STEP_NUM_TASKS", "1"},
                                            {"SLURM_NODEID", "0"}, {"SLURM_STEP_NODELIST", "gpu02"}})));
  CHECK(d.values.at(Setting::nnodes).text == "1");
  CHECK(d.values.count(Setting::master_addr) == 0);
  CHECK(d.values.count(Setting::master_port) == 0);
  CHECK(d.values.at(Setting::rdzv_id).text == "12345.0");
}

TEST_CASE("a salloc or sbatch shell outside a step detects nothing") {
  // salloc -N3's shell, and an sbatch script (which has SLURM_NODEID and SLURM_PROCID, but no step).
  Vars salloc{{"SLURM_JOB_ID", "2"}, {"SLURM_JOB_NUM_NODES", "3"}, {"SLURM_NNODES", "3"},
              {"SLURM_JOB_NODELIST", "node[1-3]"}, {"SLURM_NODELIST", "node[1-3]"}, {"SLURM_TASKS_PER_NODE", "1(x3)"}};
  CHECK(detect_cluster(env_of(salloc)).values.empty());
  Vars batch = salloc;
  batch.insert({{"SLURM_NODEID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURMD_NODENAME", "node1"}});
  CHECK(detect_cluster(env_of(batch)).values.empty());
  CHECK(detect_cluster(env_of({})).scheduler.empty());
}

TEST_CASE("more than one srun task per node is refused with the fix, when the ranks come from srun") {
  const Vars two = srun_step({{"SLURM_STEP_NUM_TASKS", "6"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}});
  auto r = parse({"train.py"}, two);
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  CHECK(r.error().message ==
        "srun started 6 tasks on 3 nodes (SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES), and dtlaunch wants one per "
        "node, as it starts the node's workers itself: use `srun --ntasks-per-node=1 --ntasks=3 dtlaunch ...` "
        "(--ntasks too: srun takes the allocation's task count over --ntasks-per-node)");
  // Given both, the user says what each task is.
  CHECK(ok({"--nnodes=6", "--node_rank=4", "train.py"}, two).node_rank == 4);
}

TEST_CASE("Open MPI's and PMI's ranks give nnodes and node_rank; master_addr stays the user's") {
  auto o = ok({"train.py"}, {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"PMI_SIZE", "9"},
                             {"PMI_RANK", "8"}});
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.source(Setting::nnodes).where == "OMPI_COMM_WORLD_SIZE");
  CHECK(o.source(Setting::nnodes).kind == Source::Kind::detected);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(o.source(Setting::master_addr).kind == Source::Kind::default_);
  auto p = ok({"train.py"}, {{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}});
  CHECK(p.max_nodes == 3);
  CHECK(p.node_rank == 2);
  CHECK(p.source(Setting::node_rank).where == "PMI_RANK");
  // mpirun inside an srun step: mpirun's world is the one dtlaunch was started in.
  CHECK(detect_cluster(env_of(srun_step({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}})))
            .scheduler == "Open MPI");
}

TEST_CASE("flags and variables win over what srun says, which wins over the config file") {
  auto o = ok({"train.py"}, srun_step());
  CHECK(o.max_nodes == 3);
  CHECK(o.node_rank == 1);
  CHECK(o.master_addr == "gpu02");
  CHECK(o.master_port == 12345);
  CHECK(o.run_id == "12345.0");
  CHECK(o.source(Setting::master_addr).kind == Source::Kind::detected);
  auto given = ok({"--master_addr=10.0.0.1", "--run_id=mine", "train.py"}, srun_step({{"PET_MASTER_PORT", "4000"}}));
  CHECK(given.master_addr == "10.0.0.1");
  CHECK(given.master_port == 4000);
  CHECK(given.run_id == "mine");
  CHECK(given.max_nodes == 3);
  auto filed = parse_command_line({"--config_file=c.yaml", "train.py"}, env_of(srun_step()),
                                  dtl::test::files_of({{"c.yaml", "nnodes: 5\nmax_restarts: 2\n"}}));
  REQUIRE(filed.value().options);
  CHECK(filed->options->max_nodes == 3);
  CHECK(filed->options->max_restarts == 2);
}

TEST_CASE("print_config names the variable each detected value came from") {
  auto r = parse({"--print_config"}, srun_step());
  REQUIRE(r);
  for (size_t at; (at = r->output.find("   ")) != std::string::npos;) r->output.erase(at, 1);  // the alignment
  INFO(r->output);
  CHECK(r->output.find("nnodes: 3  # SLURM_STEP_NUM_NODES\n") != std::string::npos);
  CHECK(r->output.find("node_rank: 1  # SLURM_NODEID\n") != std::string::npos);
  CHECK(r->output.find("master_addr: gpu02  # SLURM_STEP_NODELIST (its first host)\n") != std::string::npos);
  CHECK(r->output.find("master_port: 12345  # SLURM_JOB_ID (10000 + SLURM_JOB_ID % 10000)\n") != std::string::npos);
  CHECK(r->output.find("rdzv_id: 12345.0  # SLURM_JOB_ID.SLURM_STEP_ID\n") != std::string::npos);
}

TEST_CASE("errors name the scheduler's variable") {
  auto r = parse({"train.py"}, srun_step({{"SLURM_NODEID", "7"}}));
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "SLURM_NODEID: expected a node rank in 0..2 (got '7')");
  auto bad = parse({"train.py"}, srun_step({{"SLURM_STEP_NODELIST", "n[3-1]"}}));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "SLURM_STEP_NODELIST=n[3-1]: hostlist item 'n[3-1]': range '3-1' goes down (give --master_addr)");
  CHECK(ok({"--master_addr=h", "train.py"}, srun_step({{"SLURM_STEP_NODELIST", "n[3-1]"}})).master_addr == "h");
}

TEST_CASE("launcher slurm becomes srun with one task per node and the same arguments") {
  const Vars salloc{{"SLURM_JOB_ID", "2"}, {"SLURM_JOB_NUM_NODES", "3"}};
  const std::vector<std::string> args{"--launcher", "slurm", "--nproc_per_node=2", "--", "train.py", "--launcher",
                                      "x"};
  auto o = ok(args, salloc);
  CHECK(o.launcher == "slurm");
  auto command = dtl::fanout::srun_command(args, o, env_of(salloc), "/bin/dtlaunch");
  REQUIRE(command);
  CHECK(*command ==
        std::vector<std::string>{"srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--nodes=3", "--ntasks=3",
                                 "/bin/dtlaunch",
                                 "--nproc_per_node=2", "--launcher=", "--", "train.py", "--launcher", "x"});
  // The agents' own line must not start srun again, and parses as the same launch.
  const auto& srun = *command;
  auto agent = ok(std::vector<std::string>(srun.begin() + 6, srun.end()), srun_step({{"PET_LAUNCHER", "slurm"}}));
  CHECK(agent.launcher.empty());
  CHECK(agent.program_args == std::vector<std::string>{"--launcher", "x"});

  // accelerate's spelling keeps its first word, which says how the rest reads.
  const std::vector<std::string> acc{"launch", "--launcher=slurm", "--num_processes=4", "t.py"};
  auto accelerate = dtl::fanout::srun_command(acc, ok(acc, salloc), env_of(salloc), "d");
  REQUIRE(accelerate);
  CHECK(std::vector<std::string>(accelerate->begin() + 5, accelerate->end()) ==
        std::vector<std::string>{"d", "launch", "--num_processes=4", "--launcher=", "--", "t.py"});

  const std::vector<std::string> two{"--launcher=slurm", "--nnodes=2", "train.py"};
  auto fewer = dtl::fanout::srun_command(two, ok(two, salloc), env_of(salloc), "d");
  REQUIRE(fewer);
  CHECK((*fewer)[3] == "--nodes=2");
  CHECK((*fewer)[4] == "--ntasks=2");
}

TEST_CASE("launcher slurm gives each agent the CPUs of the job's smallest node, unless SRUN_CPUS_PER_TASK is set") {
  const std::vector<std::string> args{"--launcher=slurm", "train.py"};
  const auto cpus = [&](Vars env) {
    env["SLURM_JOB_ID"] = "2";
    auto command = dtl::fanout::srun_command(args, ok(args, env), env_of(env), "d");
    REQUIRE(command);
    for (const auto& a : *command) {
      if (a.rfind("--cpus-per-task=", 0) == 0) return a;
    }
    return std::string("none");
  };
  CHECK(cpus({{"SLURM_JOB_CPUS_PER_NODE", "72(x2),36"}}) == "--cpus-per-task=36");
  CHECK(cpus({{"SLURM_JOB_CPUS_PER_NODE", "8"}}) == "--cpus-per-task=8");
  CHECK(cpus({{"SLURM_JOB_CPUS_PER_NODE", "8(x3)"}, {"SRUN_CPUS_PER_TASK", "2"}}) == "none");
  CHECK(cpus({{"SLURM_JOB_CPUS_PER_NODE", "x"}}) == "none");
  CHECK(cpus({}) == "none");
}

TEST_CASE("launcher slurm is refused outside an allocation, inside a step and with --node_rank") {
  const auto error = [](std::vector<std::string> args, const Vars& env) {
    auto command = dtl::fanout::srun_command(args, ok(args, env), env_of(env), "d");
    REQUIRE_FALSE(command);
    CHECK(command.error().exit_code == 2);
    return command.error().message;
  };
  CHECK(error({"--launcher=slurm", "t.py"}, {}) ==
        "--launcher=slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); run it in an sbatch script or a "
        "salloc shell");
  CHECK(error({"--launcher=slurm", "--nnodes=3", "--node_rank=0", "t.py"}, {{"SLURM_JOB_ID", "1"}}) ==
        "--node_rank=0 with --launcher=slurm: srun gives each node its rank");
  CHECK(error({"--launcher=slurm", "t.py"}, srun_step()) ==
        "--launcher=slurm: already inside srun step 12345.0, where each task is a node's agent; drop --launcher");
}

TEST_CASE("launcher ssh is the --hostfile/--hosts fan-out, and slurm refuses hosts of its own") {
  const auto start = [](std::vector<std::string> args) {
    return dtl::fanout::start_through_launcher(args, ok(args, {{"SLURM_JOB_ID", "2"}}), env_of({}));
  };
  CHECK(start({"t.py"}) == std::nullopt);
  CHECK(start({"--launcher=ssh", "--hosts=a:1,b:1", "t.py"}) == std::nullopt);  // fanout/fanout.h goes on
  CHECK(start({"--launcher=ssh", "t.py"}) == 2);
  CHECK(start({"--launcher=slurm", "--hosts=a:1,b:1", "t.py"}) == 2);
}

TEST_CASE("an srun step whose SLURM_JOB_ID is no number is refused unless the port and id are given") {
  // it gave every node port 29500 and run id none, without a word
  auto r = parse({"t.py"}, srun_step({{"SLURM_JOB_ID", "abc"}}));
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "SLURM_JOB_ID=abc is not a job number (give --master_port and --rdzv_id)");
  auto o = ok({"--master_port=29511", "--rdzv_id=j", "t.py"}, srun_step({{"SLURM_JOB_ID", "abc"}}));
  CHECK(o.master_port == 29511);
}

TEST_CASE("a step's node list is read up to its first host") {
  std::string many;
  for (int i = 0; i < 4000; ++i) many += "x[0-65535],";
  CHECK(ok({"t.py"}, srun_step({{"SLURM_STEP_NODELIST", many}})).master_addr == "x0");
}
