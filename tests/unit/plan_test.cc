#include <catch2/catch.hpp>

#include <map>

#include "config/command_line.h"
#include "launcher/plan.h"

using namespace dtl;
using namespace dtl::launcher;
using namespace dtl::node;

namespace {

struct Fixture {
  std::map<std::string, std::string> env{{"PATH", "/usr/bin:/bin"}};
  GpuInventory gpus{{}, "none"};
  std::vector<std::pair<std::string, int>> reserved;

  dtl::EnvLookup lookup() {
    return [this](const std::string& k) -> std::optional<std::string> {
      auto it = env.find(k);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
  }
  std::map<std::string, std::string> files;  ///< path -> its kind, as posix::file_kind says it

  /// The plan, or why the settings or the plan refuse the launch.
  Result<LaunchPlan> plan(std::vector<std::string> args) {
    auto parsed = config::parse_command_line(args, lookup());
    if (!parsed) return tl::unexpected(parsed.error());
    REQUIRE(parsed.value().options);
    HostFacts host{gpus, 6, lookup(), [this](const std::string& addr, int port) -> Result<int> {
                     reserved.emplace_back(addr, port);
                     if (port == 1) return fail("port 1 is taken");
                     return port == 0 ? 41000 : port;
                   }};
    host.file_kind = [this](const std::string& path) -> std::optional<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return std::nullopt;
      return it->second;
    };
    return make_plan(*parsed->options, host);
  }
  LaunchPlan ok(std::vector<std::string> args) {
    auto p = plan(std::move(args));
    if (!p) FAIL(p.error().message);
    return *p;
  }
  /// Refused before anything starts (the prefix "" is main.cc's).
  Error refused(std::vector<std::string> args) {
    auto p = plan(std::move(args));
    REQUIRE_FALSE(p);
    return p.error();
  }
};

}  // namespace

TEST_CASE("a python script runs as python3 -u, a module with -m, a program directly") {
  Fixture f;
  auto p = f.ok({"-m", "pkg.train", "--lr", "1"});
  CHECK(p.argv == std::vector<std::string>{"python3", "-u", "-m", "pkg.train", "--lr", "1"});
  CHECK(p.exec_path.ends_with("/python3"));
  f.env["PYTHON_EXEC"] = "/bin/sh";
  CHECK(f.ok({"-m", "x"}).exec_path == "/bin/sh");
  auto direct = f.ok({"--no_python", "true", "a"});
  CHECK(direct.argv == std::vector<std::string>{"true", "a"});
  CHECK(direct.exec_path.ends_with("/true"));
}

TEST_CASE("nproc words resolve against the machine") {
  Fixture f;
  CHECK(f.ok({"--nproc_per_node=cpu", "--no_python", "true"}).nproc == 6);
  CHECK(f.ok({"--nproc_per_node=auto", "--no_python", "true"}).nproc == 6);
  f.gpus = discover_gpus(4);
  CHECK(f.ok({"--nproc_per_node=auto", "--no_python", "true"}).nproc == 4);
  CHECK(f.ok({"--nproc_per_node=gpu", "--no_python", "true"}).nproc == 4);
}

TEST_CASE("per_worker visibility gives each worker its own GPU, all gives every worker the list") {
  Fixture f;
  f.gpus = discover_gpus(2);
  auto p = f.ok({"--nproc_per_node=gpu", "--no_python", "true"});
  CHECK(p.cuda_visible_devices == std::vector<std::optional<std::string>>{"0", "1"});
  auto all = f.ok({"--nproc_per_node=gpu", "--gpu_visibility=all", "--no_python", "true"});
  CHECK(all.cuda_visible_devices == std::vector<std::optional<std::string>>{"0,1", "0,1"});
  auto cpu = f.ok({"--nproc_per_node=cpu", "--no_python", "true"});
  CHECK(cpu.cuda_visible_devices == std::vector<std::optional<std::string>>(6, std::nullopt));
  CHECK(cpu.notices.size() == 1);  // OMP only: no GPU line for a CPU job
}

TEST_CASE("deepspeed: every worker sees its node's slots, with GPUs or without, as deepspeed's launch.py") {
  using Visible = std::vector<std::optional<std::string>>;
  Fixture f;  // no GPU: deepspeed's CPU accelerator still sets the slots, and checks no index
  CHECK(f.ok({"deepspeed", "--num_gpus", "2", "--no_python", "true"}).cuda_visible_devices == Visible{"0,1", "0,1"});
  CHECK(f.ok({"deepspeed", "--gpu_ids", "1,3", "--num_gpus", "2", "--no_python", "true"}).cuda_visible_devices ==
        Visible{"1,3", "1,3"});
  CHECK(f.refused({"--gpu_ids", "1", "--no_python", "true"}).message.find("GPU 1 is not visible") != std::string::npos);
  f.gpus = discover_gpus(4);  // the first N of the visible ones, as its --num_gpus
  CHECK(f.ok({"deepspeed", "--num_gpus", "2", "--no_python", "true"}).cuda_visible_devices == Visible{"0,1", "0,1"});
  f.env["CUDA_VISIBLE_DEVICES"] = "3,2,1";
  CHECK(f.ok({"deepspeed", "--num_gpus", "2", "--no_python", "true"}).cuda_visible_devices == Visible{"3,2", "3,2"});
  CHECK(f.ok({"deepspeed", "--gpu_ids", "2", "--no_python", "true"}).cuda_visible_devices == Visible{"1"});
  CHECK(f.ok({"deepspeed", "--gpu_visibility", "per_worker", "--no_python", "true"}).cuda_visible_devices ==
        Visible{"3", "2", "1"});
}

TEST_CASE("more workers than gpu_ids is refused") {
  Fixture f;
  f.gpus = discover_gpus(4);
  CHECK(f.refused({"--gpu_ids=0,1", "--nproc_per_node=3", "--no_python", "true"}).message ==
        "--nproc_per_node=3 is more than the 2 GPUs listed in --gpu_ids=0,1");
}

TEST_CASE("a refused setting that came from a variable is named as the user set it") {
  Fixture f;
  f.env["PET_NPROC_PER_NODE"] = "gpu";
  CHECK(f.refused({"--no_python", "true"}).message ==
        "nproc_per_node=gpu (from PET_NPROC_PER_NODE) but no GPU is visible (none found through "
        "NVML or nvidia-smi; --fake_gpus N pretends to have N)");
  f.gpus = discover_gpus(4);
  f.env.erase("PET_NPROC_PER_NODE");
  f.env["PET_GPU_IDS"] = "1,3";
  CHECK(f.refused({"--nproc_per_node=3", "--no_python", "true"}).message ==
        "--nproc_per_node=3 is more than the 2 GPUs listed in gpu_ids=1,3 (from PET_GPU_IDS)");
}

TEST_CASE("the master port is checked, and standalone asks for a free one") {
  Fixture f;
  CHECK(f.ok({"--master_port=29500", "--no_python", "true"}).group.master_port == 29500);
  CHECK(f.ok({"--master_port=29500", "--no_python", "true"}).group.run_id == "none");
  CHECK(f.ok({"--standalone", "--master_port=1234", "--no_python", "true"}).group.master_port == 41000);
  CHECK(f.refused({"--master_port=1", "--no_python", "true"}).message == "port 1 is taken");
  CHECK(f.reserved.back() == std::pair<std::string, int>{"127.0.0.1", 1});
}

TEST_CASE("one static node with --rdzv_endpoint serves its store there, as torch's static handler; garbage is refused") {
  Fixture f;
  auto plan = f.ok({"--rdzv_endpoint=127.0.0.2:29511", "--no_python", "true"});
  CHECK(plan.group.master_addr == "127.0.0.2");
  CHECK(plan.group.master_port == 29511);
  CHECK(f.reserved.back() == std::pair<std::string, int>{"127.0.0.2", 29511});
  f.env["PET_RDZV_ENDPOINT"] = "127.0.0.1:99999";
  CHECK(f.refused({"--no_python", "true"}).message == "PET_RDZV_ENDPOINT: port '99999' is not in 1..65535");
  CHECK(f.ok({"--standalone", "--no_python", "true"}).group.master_port == 41000);  // standalone's own endpoint
}

TEST_CASE("one node given no port anywhere is standalone, as torchrun 2.x: a free port and a fresh run id") {
  Fixture f;
  auto plan = f.ok({"--no_python", "true"});
  CHECK(plan.group.master_port == 41000);
  CHECK(f.reserved.back() == std::pair<std::string, int>{"127.0.0.1", 0});
  CHECK(plan.group.run_id.size() == 16);
  CHECK(f.ok({"--run_id=job1", "--no_python", "true"}).group.run_id == "job1");  // a given run id is kept
  f.env["PET_MASTER_PORT"] = "29500";  // a port given by variable is a port given
  CHECK(f.ok({"--no_python", "true"}).group.master_port == 29500);
}

TEST_CASE("virtual_local_rank: LOCAL_RANK 0 everywhere, each worker its own device, as torchrun's") {
  Fixture f;
  auto plan = f.ok({"--virtual_local_rank", "--nproc_per_node=2", "--no_python", "true"});
  CHECK(plan.group.virtual_local_rank);
  CHECK(plan.cuda_visible_devices == std::vector<std::optional<std::string>>{"0", "1"});
  f.env["CUDA_VISIBLE_DEVICES"] = "5, 7";
  f.gpus = discover_gpus(8);
  CHECK(f.refused({"--virtual_local_rank", "--nproc_per_node=cpu", "--no_python", "true"}).message ==
        "--virtual_local_rank: local_rank 2 has no GPU in CUDA_VISIBLE_DEVICES=5, 7");
  CHECK(f.ok({"--virtual_local_rank", "--nproc_per_node=2", "--no_python", "true"}).cuda_visible_devices ==
        std::vector<std::optional<std::string>>{"5", "7"});
}

TEST_CASE("the workers learn which signals are forwarded, by torchrun's names") {
  Fixture f;
  CHECK(f.ok({"--no_python", "true"}).group.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(f.ok({"--signals_to_handle=usr1,SIGTERM", "--no_python", "true"}).group.signals_to_handle == "SIGUSR1,SIGTERM");
}

TEST_CASE("the --local-rank argument goes right after the script, spelled as the machine's torch does") {
  Fixture f;
  f.env["PYTHON_EXEC"] = "/bin/sh";  // an interpreter find_program finds; its torch is faked below
  auto plan_with = [&](std::optional<std::string> version, std::vector<std::string> args) {
    auto parsed = config::parse_command_line(args, f.lookup());
    REQUIRE(parsed.value().options);
    HostFacts host{f.gpus, 6, f.lookup(), [](const std::string&, int) -> Result<int> { return 41000; }};
    host.exists = [](const std::string&) { return true; };
    host.torch_version = [version](const std::string&) { return version; };
    return make_plan(*parsed->options, host).value().argv;
  };
  using V = std::vector<std::string>;
  CHECK(plan_with("2.15.0", {"torch.distributed.launch", "t.py", "--x"}) == V{"/bin/sh", "-u", "t.py", "--local-rank=${local_rank}", "--x"});
  CHECK(plan_with("1.13.0a0", {"torch.distributed.launch", "t.py"}) == V{"/bin/sh", "-u", "t.py", "--local_rank=${local_rank}"});
  CHECK(plan_with(std::nullopt, {"torch.distributed.launch", "t.py"}) == V{"/bin/sh", "-u", "t.py", "--local-rank=${local_rank}"});
  CHECK(plan_with("2.15.0", {"deepspeed", "t.py"}) == V{"/bin/sh", "-u", "t.py", "--local_rank=${local_rank}"});
}

TEST_CASE("local_rank is substituted in arguments only where written") {
  CHECK(substitute_local_rank({"a", "--x=${local_rank}", "${rank}"}, 3) ==
        std::vector<std::string>{"a", "--x=3", "${rank}"});
}

TEST_CASE("accelerate's variables and the file's env entries go to the workers through the plan") {
  Fixture f;
  auto p = f.ok({"--mixed_precision=bf16", "--debug", "--no_python", "true"});
  CHECK(p.group.variables == EnvPairs{{"ACCELERATE_MIXED_PRECISION", "bf16"}, {"ACCELERATE_DEBUG_MODE", "true"}});
  CHECK(f.env.count("ACCELERATE_MIXED_PRECISION") == 0);
  // The plan reads the environment as the workers will see it: an env: entry sets OMP_NUM_THREADS.
  config::LaunchOptions o;
  o.program = "true";
  o.no_python = true;
  o.nproc_per_node.count = 2;
  o.extra_env = {{"OMP_NUM_THREADS", "4"}};
  HostFacts host{f.gpus, 6, f.lookup(), [](const std::string&, int port) -> Result<int> { return port; }};
  auto planned = make_plan(o, host);
  REQUIRE(planned);
  const LaunchPlan& plan = *planned;
  CHECK(plan.group.variables == EnvPairs{{"OMP_NUM_THREADS", "4"}});
  CHECK(plan.notices.empty());  // no "OMP_NUM_THREADS=1 for each worker"
}

TEST_CASE("after launch, gpu_ids are physical ids whatever CUDA_VISIBLE_DEVICES says, and every worker sees them") {
  Fixture f;
  f.gpus = discover_gpus(4);
  f.env["CUDA_VISIBLE_DEVICES"] = "2,3";
  auto p = f.ok({"launch", "--multi_gpu", "--num_processes=2", "--gpu_ids=0,1", "--no_python", "true"});
  CHECK(p.cuda_visible_devices == std::vector<std::optional<std::string>>{"0,1", "0,1"});
  // dtlaunch's own --gpu_ids: indices among the visible GPUs 2,3, one per worker.
  auto own = f.ok({"--nproc_per_node=2", "--gpu_ids=0,1", "--no_python", "true"});
  CHECK(own.cuda_visible_devices == std::vector<std::optional<std::string>>{"2", "3"});
  // Without gpu_ids, accelerate names no GPU: CUDA_VISIBLE_DEVICES is left as inherited.
  f.env.erase("CUDA_VISIBLE_DEVICES");
  auto all = f.ok({"launch", "--no_python", "true"});
  CHECK(all.nproc == 4);  // no num_processes: one per GPU
  CHECK(all.cuda_visible_devices == std::vector<std::optional<std::string>>(4, std::nullopt));
}

TEST_CASE("after launch, the plan carries accelerate's variables for the workers") {
  Fixture f;
  auto p = f.ok({"launch", "--cpu", "--num_processes=2", "--mixed_precision=bf16", "--no_python", "true"});
  std::map<std::string, std::string> vars(p.group.variables.begin(), p.group.variables.end());
  CHECK(vars["ACCELERATE_USE_CPU"] == "True");
  CHECK(vars["ACCELERATE_MIXED_PRECISION"] == "bf16");
  CHECK(vars["KMP_BLOCKTIME"] == "1");
  CHECK(vars.count("OMP_NUM_THREADS") == 1);
  CHECK(p.notices.empty());  // accelerate's OMP_NUM_THREADS, not dtlaunch's notice
}

TEST_CASE("the plan finds programs and scripts through the host's facts, not the disk") {
  auto options = config::parse_command_line({"--no_python", "trainer", "x"}, [](const std::string&) {
    return std::optional<std::string>();
  });
  REQUIRE(options.value().options);
  std::vector<std::string> looked_up;
  HostFacts host{GpuInventory{{}, "none"}, 2, [](const std::string& k) -> std::optional<std::string> {
                   return k == "PATH" ? std::optional<std::string>("/opt/bin") : std::nullopt;
                 },
                 [](const std::string&, int port) -> Result<int> { return port; }};
  host.find_program = [&](const std::string& name, const std::string& path) -> std::optional<std::string> {
    looked_up.push_back(name + " in " + path);
    return name == "trainer" ? std::optional<std::string>("/opt/bin/trainer") : std::nullopt;
  };
  host.exists = [](const std::string& path) { return path == "train.py"; };
  auto plan = make_plan(*options->options, host);
  REQUIRE(plan);
  CHECK(plan->exec_path == "/opt/bin/trainer");
  CHECK(looked_up == std::vector<std::string>{"trainer in /opt/bin"});

  auto script = config::parse_command_line({"train.py"}, [](const std::string&) { return std::optional<std::string>(); });
  host.find_program = [](const std::string& name, const std::string&) -> std::optional<std::string> {
    return "/fake/" + name;
  };
  CHECK(make_plan(*script.value().options, host).value().argv ==
        std::vector<std::string>{"python3", "-u", "train.py"});
  auto missing = config::parse_command_line({"nothere.py"}, [](const std::string&) { return std::optional<std::string>(); });
  auto refused = make_plan(*missing.value().options, host);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().exit_code == 127);
}

TEST_CASE("torchrun's --run_path: the script through runpy.run_path, over --no_python") {
  Fixture f;
  for (auto args : {std::vector<std::string>{"--run_path", "/etc/hostname", "a"},
                    std::vector<std::string>{"--run-path", "--no_python", "/etc/hostname", "a"}}) {
    auto p = f.ok(args);
    REQUIRE(p.argv.size() == 6);
    CHECK(p.argv[0] == "python3");
    CHECK(p.argv[2] == "-c");
    CHECK(p.argv[3].find("runpy.run_path(sys.argv[0], run_name='__main__')") != std::string::npos);
    CHECK(std::vector<std::string>(p.argv.begin() + 4, p.argv.end()) == std::vector<std::string>{"/etc/hostname", "a"});
  }
  CHECK(f.refused({"--run_path", "/no/such/script.py"}).message.find("script '/no/such/script.py' not found") == 0);
}

TEST_CASE("TORCHELASTIC_TIMER_FILE: a folder there is refused before the start, a file there is replaced and said") {
  Fixture f;
  f.files = {{"/run/timers", "a folder"}, {"/run/timers/.", "a folder"}, {"/run/old", "a regular file"},
             {"/run/.", "a folder"}};
  f.env["TORCHELASTIC_TIMER_FILE"] = "/run/timers";
  CHECK(f.ok({"--no_python", "true"}).notices.size() == 0);  // without TORCHELASTIC_ENABLE_FILE_TIMER=1 nothing is served there
  f.env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1";
  auto e = f.refused({"--no_python", "true"});
  CHECK(e.exit_code == 2);
  CHECK(e.message ==
        "TORCHELASTIC_TIMER_FILE=/run/timers names a folder: the workers' expiration timers need a FIFO there (name a "
        "path that is not there yet, or unset it for one in the run's log folder)");
  f.env["TORCHELASTIC_TIMER_FILE"] = "/run/old";
  CHECK(f.ok({"--no_python", "true"}).notices ==
        std::vector<std::string>{"warning: TORCHELASTIC_TIMER_FILE=/run/old is a regular file already there: dtlaunch "
                                 "deletes it and makes the timers' FIFO in its place, as torch's FileTimerServer does"});
  f.env["TORCHELASTIC_TIMER_FILE"] = "/run/new";
  CHECK(f.ok({"--no_python", "true"}).notices.empty());
  f.env["TORCHELASTIC_TIMER_FILE"] = "/nowhere/timers";
  CHECK(f.refused({"--no_python", "true"}).message == "TORCHELASTIC_TIMER_FILE=/nowhere/timers: its folder /nowhere is not there");
  f.env["TORCHELASTIC_TIMER_FILE"] = "";
  CHECK(f.refused({"--no_python", "true"}).exit_code == 2);
}
