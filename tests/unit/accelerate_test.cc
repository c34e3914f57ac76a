// `dtlaunch launch`: accelerate launch's command line and files with accelerate's meaning, and the
// variables its workers get (config/accelerate.h). The goldens from the real accelerate are compared
// end to end in tests/e2e/test_accelerate_parity.py; these pin each rule on its own.
#include <catch2/catch.hpp>

#include <map>

#include "config/accelerate.h"
#include "config/command_line.h"
#include "config/flags.h"
#include "base/text.h"
#include "fake_env.h"

using namespace dtl::config;
using dtl::test::env_of;
using dtl::test::files_of;

namespace {

using Vars = std::map<std::string, std::string>;

/// The command line, with `acc.yaml` holding `yaml` when given, and no default file.
ParseResult parse(std::vector<std::string> args, const std::string& yaml = "") {
  return parse_command_line(args, env_of({}), yaml.empty() ? files_of({}) : files_of({{"acc.yaml", yaml}}));
}

LaunchOptions ok(std::vector<std::string> args, const std::string& yaml = "") {
  auto r = parse(std::move(args), yaml);
  INFO((r ? r->output : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

std::string error(std::vector<std::string> args, const std::string& yaml = "") {
  auto r = parse(std::move(args), yaml);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find('\n') == std::string::npos);
  return r.error().message;
}

std::map<std::string, std::string> variables(const LaunchOptions& o, AccelerateHost host) {
  if (!host.env) host.env = env_of({});
  auto pairs = accelerate_variables(o, host);
  return {pairs.begin(), pairs.end()};
}

}  // namespace

TEST_CASE("dtlaunch launch ARGS is dtlaunch ARGS with accelerate's meaning of the flags") {
  auto o = ok({"launch", "--num_processes", "8", "--num_machines=2", "--machine_rank", "1", "--main_process_ip",
               "10.0.0.1", "--main-process-port", "29501", "--same_network", "t.py", "--lr", "1"});
  CHECK(o.accelerate.launch);
  CHECK(o.nproc_per_node.count == 4);  // the total over all machines
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.master_port == 29501);
  CHECK(o.program == "t.py");
  CHECK(o.program_args == std::vector<std::string>{"--lr", "1"});
  CHECK(o.source(Setting::nproc_per_node).where == "--num_processes");
  CHECK(o.source(Setting::nproc_per_node).note == "total 8 over 2 machines");
  // Without `launch`, the same flags are accepted, and dtlaunch's own launch stays as it was.
  auto plain = ok({"--nproc_per_node=2", "t.py"});
  CHECK_FALSE(plain.accelerate.launch);
  CHECK(ok({"--num_processes=2", "t.py"}).nproc_per_node.count == 2);
  // An accelerate setting without `launch` is not dropped: the workers get accelerate's variables.
  auto fsdp = ok({"--use_fsdp", "--nproc_per_node=2", "t.py"});
  CHECK(fsdp.accelerate.launch);
  CHECK(variables(fsdp, {.nproc_per_node = 2})["ACCELERATE_USE_FSDP"] == "true");
  CHECK_FALSE(ok({"--mixed_precision=bf16", "t.py"}).accelerate.launch);  // dtlaunch's own flag, as before
}

TEST_CASE("dtlaunch launch without num_processes runs one worker per GPU, else one, as accelerate launch does") {
  CHECK(ok({"launch", "t.py"}).nproc_per_node.kind == NprocSpec::Kind::gpu_or_one);
  CHECK(ok({"t.py"}).nproc_per_node.kind == NprocSpec::Kind::count);  // torchrun's default of 1 stays
  const std::string shown = parse({"launch", "--print_config"}).value().output;
  CHECK(shown.find("nproc_per_node: 1 ") != std::string::npos);
  CHECK(shown.find(" # default (accelerate launch: one per GPU when the machine has GPUs)\n") != std::string::npos);
}

TEST_CASE("two machines not on one network meet at main_process_ip:main_process_port") {
  auto o = ok({"launch", "--num_machines=2", "--num_processes=4", "--main_process_ip=h", "--main_process_port=29600",
               "t.py"});
  CHECK(o.rdzv_endpoint == "h:29600");
  CHECK(o.source(Setting::rdzv_endpoint).note == "main_process_ip:main_process_port, no --same_network");
}

TEST_CASE("two spellings of one setting that disagree are an error naming both") {
  CHECK(error({"--nproc_per_node", "4", "--num_processes", "6", "--num_machines", "1", "t.py"}) ==
        "--nproc_per_node=4 and --num_processes=6 disagree (--num_processes is the total over --num_machines=1: 6 "
        "per machine); give one of them");
  CHECK(error({"--nnodes=2", "--num-machines=3", "t.py"}) == "--nnodes=2 and --num-machines=3 disagree; give one of them");
  CHECK(error({"--master_port=1", "--main_process_port=2", "t.py"}) ==
        "--master_port=1 and --main_process_port=2 disagree; give one of them");
  // Agreeing spellings are fine: 6 over 2 machines is 3 per machine.
  CHECK(ok({"--nproc_per_node=3", "--num_processes=6", "--num_machines=2", "--main_process_ip=h", "t.py"})
            .nproc_per_node.count == 3);
  CHECK(error({"launch", "--num_processes=7", "--num_machines=2", "t.py"}) ==
        "--num_processes: expected a total divisible by --num_machines=2 (num_processes counts the processes of all "
        "machines) (got '7')");
}

TEST_CASE("accelerate's flags that dtlaunch cannot honour are refused with one line that says why") {
  CHECK(error({"launch", "--megatron_lm_tp_degree=2", "t.py"}) ==
        "--megatron_lm_tp_degree: accelerate launch's flag for Megatron-LM, which dtlaunch does not start");
  CHECK(error({"launch", "--tpu", "t.py"}) == "--tpu: accelerate launch's flag for TPUs, which dtlaunch does not start");
  CHECK(error({"launch", "--mpirun-hostfile", "h", "t.py"}).rfind("--mpirun_hostfile: accelerate launch's flag for mpirun", 0) == 0);
  CHECK(error({"launch", "--multi_gpu", "--use_fsdp", "t.py"}) ==
        "--multi_gpu and --use_fsdp choose two kinds of run; accelerate takes one of --cpu, --multi_gpu, "
        "--use_deepspeed, --use_fsdp at a time");
  // DeepSpeed's own launchers on several machines: the ssh fan-out over deepspeed_hostfile.
  const auto pdsh = ok({"launch", "--use_deepspeed", "--num_machines=2", "--num_processes=2", "--main_process_ip=h", "t.py"});
  CHECK(pdsh.fanout.hostfile == "/job/hostfile");
  CHECK(pdsh.source(Setting::hostfile).where == "deepspeed's default hostfile");
  // deepspeed's launch.py starts the workers there: its variables (CROSS_RANK, ...) and GPU narrowing
  CHECK(pdsh.deepspeed_variables);
  CHECK(pdsh.local_rank_arg == LaunchOptions::LocalRankArg::none);  // accelerate's --no_local_rank
  const auto filtered = ok({"launch", "--use_deepspeed", "--num_machines=2", "--deepspeed_hostfile=hf",
                            "--deepspeed_inclusion_filter=a@b", "t.py"});
  CHECK(filtered.fanout.hostfile == "hf");
  CHECK(filtered.fanout.include == "a@b");
  CHECK(filtered.source(Setting::include).where == "--deepspeed_inclusion_filter");
  const auto standard = ok({"launch", "--use_deepspeed", "--num_machines=2", "--num_processes=2", "--main_process_ip=h",
                            "--deepspeed_multinode_launcher=standard", "--deepspeed_hostfile=hf", "t.py"});
  CHECK(standard.max_nodes == 2);
  CHECK(standard.fanout.hostfile.empty());
  CHECK_FALSE(standard.deepspeed_variables);  // torchrun's workers
  // nossh: `deepspeed --no_ssh --node_rank R` on each machine, without --no_local_rank
  const auto nossh = ok({"launch", "--use_deepspeed", "--num_machines=2", "--num_processes=2", "--main_process_ip=h",
                         "--deepspeed_multinode_launcher=nossh", "--deepspeed_hostfile=hf", "t.py"});
  CHECK(nossh.fanout.hostfile.empty());
  CHECK(nossh.deepspeed_variables);
  CHECK(nossh.local_rank_arg == LaunchOptions::LocalRankArg::underscore);
  CHECK_FALSE(ok({"launch", "--use_deepspeed", "--num_processes=2", "t.py"}).deepspeed_variables);  // one machine: torchrun
  CHECK(error({"launch", "--use_fsdp", "--fsdp_sync_module_states=false", "t.py"}).find(
            "fsdp_cpu_ram_efficient_loading needs fsdp_sync_module_states") != std::string::npos);
  CHECK(error({"launch", "--dynamo_backend=fast", "t.py"}).rfind("--dynamo_backend: expected NO or EAGER", 0) == 0);
}

TEST_CASE("gpu_ids are physical ids in accelerate's spelling and files, indices in dtlaunch's") {
  CHECK(ok({"launch", "--gpu_ids=1,3", "t.py"}).accelerate.physical_gpu_ids);
  CHECK_FALSE(ok({"--gpu_ids=1,3", "t.py"}).accelerate.physical_gpu_ids);
  CHECK(ok({"--config_file", "acc.yaml", "t.py"}, "distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: '0,1'\n")
            .accelerate.physical_gpu_ids);
  auto shown = parse({"launch", "--gpu_ids=1,3", "--num_processes=2", "--print_config"}).value().output;
  CHECK(shown.find("# gpu_ids: physical ids, accelerate's meaning (CUDA_VISIBLE_DEVICES is not read)\ngpu_ids: 1,3") !=
        std::string::npos);
  CHECK(shown.find("# accelerate: --num_processes / num_processes, the total over all machines (2 here)\n"
                   "nproc_per_node: 2 ") != std::string::npos);
  CHECK(shown.find("gpu_visibility: all") != std::string::npos);
}

TEST_CASE("accelerate's simple launcher: ACCELERATE_USE_CPU as Python writes it, KMP settings, threads per core") {
  auto o = ok({"launch", "--cpu", "--num_processes=1", "--mixed_precision=fp16", "t.py"});
  auto v = variables(o, {.nproc_per_node = 1, .physical_cores = 8});
  CHECK(v == std::map<std::string, std::string>{{"ACCELERATE_USE_CPU", "True"},
                                                {"KMP_AFFINITY", "granularity=fine,compact,1,0"},
                                                {"KMP_BLOCKTIME", "1"},
                                                {"ACCELERATE_MIXED_PRECISION", "fp16"},
                                                {"ACCELERATE_DYNAMO_BACKEND", "NO"},
                                                {"ACCELERATE_DYNAMO_MODE", "default"},
                                                {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
                                                {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
                                                {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
                                                {"OMP_NUM_THREADS", "8"}});
  CHECK(variables(o, {.nproc_per_node = 4, .physical_cores = 8})["OMP_NUM_THREADS"] == "2");
  CHECK(variables(o, {.env = env_of({{"OMP_NUM_THREADS", "3"}}), .physical_cores = 8})["OMP_NUM_THREADS"] == "3");
  // A NO file without use_cpu: no KMP settings, and use_cpu False.
  auto no = ok({"--config_file", "acc.yaml", "t.py"}, "distributed_type: 'NO'\nnum_processes: 1\nuse_cpu: false\n");
  CHECK(variables(no, {}).count("KMP_AFFINITY") == 0);
  CHECK(variables(no, {})["ACCELERATE_USE_CPU"] == "False");
}

TEST_CASE("FSDP runs get every FSDP_ variable with accelerate's defaults, lower-cased") {
  auto o = ok({"--config_file", "acc.yaml", "t.py"},
              "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_offload_params: true\n"
              "  backward_prefetch: BACKWARD_PRE\n  fsdp_version: 2\n");
  CHECK(o.accelerate.launch);
  auto v = variables(o, {.nproc_per_node = 2});
  CHECK(v["ACCELERATE_USE_FSDP"] == "true");
  CHECK(v["FSDP_OFFLOAD_PARAMS"] == "true");  // YAML's true is Python's True, lower-cased
  CHECK(v["FSDP_BACKWARD_PREFETCH"] == "BACKWARD_PRE");  // fsdp_config's `x` is --fsdp_x
  CHECK(v["FSDP_VERSION"] == "2");
  CHECK(v["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD");
  CHECK(v["FSDP_MIN_NUM_PARAMS"] == "100000000");
  CHECK(v.count("FSDP_AUTO_WRAP_POLICY") == 0);
  CHECK(v["OMP_NUM_THREADS"] == "1");
  CHECK(v.count("ACCELERATE_USE_CPU") == 0);
}

TEST_CASE("DeepSpeed runs get accelerate's DeepSpeed variables and no dynamo or OMP_NUM_THREADS") {
  auto o = ok({"--config_file", "acc.yaml", "t.py"},
              "distributed_type: DEEPSPEED\nnum_processes: 2\nmixed_precision: bf16\ndeepspeed_config:\n"
              "  zero_stage: 3\n  offload_optimizer_device: CPU\n  gradient_clipping: 1.0\n");
  auto v = variables(o, {.env = env_of({{"PYTHONPATH", "/a::/b"}}), .cwd = "/work/run", .nproc_per_node = 2});
  CHECK(v == std::map<std::string, std::string>{{"ACCELERATE_MIXED_PRECISION", "bf16"},
                                                {"PYTHONPATH", "/a:/b:/work/run"},
                                                {"PYTORCH_NVML_BASED_CUDA_CHECK", "1"},
                                                {"ACCELERATE_CONFIG_DS_FIELDS",
                                                 "zero_stage,offload_optimizer_device,gradient_clipping,mixed_precision"},
                                                {"ACCELERATE_USE_DEEPSPEED", "true"},
                                                {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"},
                                                {"ACCELERATE_GRADIENT_CLIPPING", "1.0"},
                                                {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu"}});
  // From flags, --gradient_clipping is a float and no file fields are named.
  auto flags = ok({"launch", "--use_deepspeed", "--gradient_clipping=1", "--num_processes=2", "t.py"});
  auto fv = variables(flags, {.cwd = "/w", .nproc_per_node = 2});
  CHECK(fv["ACCELERATE_GRADIENT_CLIPPING"] == "1.0");
  CHECK(fv["ACCELERATE_CONFIG_DS_FIELDS"] == "");
}

TEST_CASE("fp8 runs get every ACCELERATE_FP8_ variable with the parser's defaults") {
  auto o = ok({"--config_file", "acc.yaml", "t.py"},
              "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp8\nfp8_config:\n  backend: AO\n");
  auto v = variables(o, {.nproc_per_node = 2});
  CHECK(v["ACCELERATE_FP8_BACKEND"] == "AO");
  CHECK(v["ACCELERATE_FP8_FORMAT"] == "HYBRID");
  CHECK(v["ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] == "1");
  CHECK(v["ACCELERATE_FP8_OVERRIDE_WGRAD"] == "False");
  CHECK(variables(ok({"launch", "--mixed_precision=bf16", "t.py"}), {}).count("ACCELERATE_FP8_FORMAT") == 0);
}

TEST_CASE("each accelerate row with a worker variable and a default gives the workers that default when unset") {
  // One run of each kind that sets none of these rows: every default must reach the workers.
  auto fsdp = variables(ok({"launch", "--use_fsdp", "--num_processes=2", "t.py"}), {.nproc_per_node = 2});
  auto fp8 = variables(ok({"launch", "--multi_gpu", "--mixed_precision=fp8", "--num_processes=2", "t.py"}),
                       {.nproc_per_node = 2});
  int checked = 0;
  for (const Flag& f : flags()) {
    if (!*f.worker_variable || !*f.default_shown) continue;
    const auto& v = std::string(f.name).rfind("fsdp_", 0) == 0 ? fsdp : fp8;
    INFO(f.name);
    REQUIRE(v.count(f.worker_variable) == 1);
    CHECK(dtl::text::lower(v.at(f.worker_variable)) == dtl::text::lower(f.default_shown));
    ++checked;
  }
  CHECK(checked == 22);  // 11 FSDP, 9 fp8, 2 dynamo rows
}

TEST_CASE("without a file or a kind flag, more than one GPU and process is accelerate's multi-GPU run") {
  auto o = ok({"launch", "--num_processes=2", "t.py"});
  CHECK(accelerate_launcher(o, {.nproc_per_node = 2, .gpus = 2}) == AccelerateLauncher::multi_gpu);
  CHECK(accelerate_launcher(o, {.nproc_per_node = 2, .gpus = 0}) == AccelerateLauncher::simple);
  CHECK(accelerate_launcher(ok({"launch", "--multi_gpu", "--num_processes=2", "t.py"}), {.nproc_per_node = 2}) ==
        AccelerateLauncher::multi_gpu);
}

TEST_CASE("python_float writes floats as Python's str() does") {
  CHECK(python_float(1) == "1.0");
  CHECK(python_float(0.5) == "0.5");
  CHECK(python_float(1e-5) == "1e-05");
  CHECK(python_float(1e20) == "1e+20");
}

TEST_CASE("ACCELERATE_USE_CPU and a file's use_cpu keep the file's kind of run; --cpu makes it a CPU run") {
  const std::string ds = "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                         "  zero_stage: 2\n  gradient_accumulation_steps: 4\n  gradient_clipping: 1.0\n";
  // accelerate launch reads its --cpu flag, never ACCELERATE_USE_CPU: the workers inherit and read it
  auto r = parse_command_line({"--config_file", "acc.yaml", "t.py"}, env_of({{"ACCELERATE_USE_CPU", "true"}}),
                              files_of({{"acc.yaml", ds}}));
  REQUIRE(r.value().options);
  CHECK(r->options->use_cpu);  // dtlaunch leaves the GPUs alone
  CHECK(accelerate_launcher(*r->options, {}) == AccelerateLauncher::deepspeed);
  auto vars = variables(*r->options, {});
  CHECK(vars["ACCELERATE_USE_DEEPSPEED"] == "true");
  CHECK(vars["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "4");
  CHECK(vars.count("ACCELERATE_USE_CPU") == 0);
  // --print_config shows the switch as it parsed
  r = parse_command_line({"--config_file", "acc.yaml", "--print_config"}, env_of({{"ACCELERATE_USE_CPU", "true"}}),
                         files_of({{"acc.yaml", ds}}));
  REQUIRE(r);
  CHECK(r->output.find("\nuse_cpu: true ") != std::string::npos);
  // the file's own use_cpu: the same (accelerate's args.cpu is the flag only)
  auto o = ok({"--config_file", "acc.yaml", "t.py"}, ds + "use_cpu: true\n");
  CHECK(accelerate_launcher(o, {}) == AccelerateLauncher::deepspeed);
  // --cpu over the file's DEEPSPEED: accelerate's simple launcher, with ACCELERATE_USE_CPU=True
  for (const char* cpu : {"--cpu", "--use_cpu"}) {
    o = ok({"launch", "--config_file", "acc.yaml", cpu, "t.py"}, ds);
    CHECK(accelerate_launcher(o, {}) == AccelerateLauncher::simple);
    CHECK(variables(o, {})["ACCELERATE_USE_CPU"] == "True");
    // the cores are spread by args.use_cpu, which a file sets from its own key (none here)
    CHECK(variables(o, {nullptr, "/w", 1, 0, 8})["OMP_NUM_THREADS"] == "1");
  }
  CHECK(variables(ok({"launch", "--cpu", "t.py"}), {nullptr, "/w", 1, 0, 8})["OMP_NUM_THREADS"] == "8");
  // two kinds as flags are still refused, as accelerate refuses them
  CHECK(error({"launch", "--cpu", "--use_deepspeed", "t.py"}).find("choose two kinds of run") != std::string::npos);
}

TEST_CASE("fp8's override_linear_precision gives what accelerate gives, from a flag, a file's list or string") {
  const std::string fp8 = "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp8\nfp8_config:\n";
  auto three = [](const LaunchOptions& o) {
    auto v = variables(o, {});
    return v["ACCELERATE_FP8_OVERRIDE_FPROP"] + "|" + v["ACCELERATE_FP8_OVERRIDE_DGRAD"] + "|" +
           v["ACCELERATE_FP8_OVERRIDE_WGRAD"];
  };
  // the flag: tuple(map(str_to_bool, x.split(","))), each as str()
  CHECK(three(ok({"launch", "--multi_gpu", "--num_processes=2", "--mixed_precision=fp8",
                  "--fp8_override_linear_precision=true,0,no", "t.py"})) == "True|False|False");
  // a file's list: str() of each value PyYAML read
  CHECK(three(ok({"--config_file", "acc.yaml", "t.py"}, fp8 + "  override_linear_precision: [true, false, true]\n")) ==
        "True|False|True");
  // a file's string (accelerate's own tests/test_configs/0_34_0_fp8.yaml): value[0], [1], [2]
  CHECK(three(ok({"--config_file", "acc.yaml", "t.py"}, fp8 + "  override_linear_precision: (false, false, false)\n")) ==
        "(|f|a");
  CHECK(three(ok({"--config_file", "acc.yaml", "t.py"}, fp8 + "  backend: TE\n")) == "False|False|False");
  CHECK(error({"launch", "--multi_gpu", "--num_processes=2", "--fp8_override_linear_precision=x", "t.py"}) ==
        "--fp8_override_linear_precision: expected comma-separated booleans like False,False,True (got 'x')");
}

TEST_CASE("an accelerate file that runs mpirun is refused in one line, as its flag is") {
  // accelerate's own tests/test_configs/0_28_0_mpi.yaml
  const std::string yaml = "distributed_type: MULTI_CPU\nnum_machines: 4\nnum_processes: 16\nuse_cpu: true\n"
                           "main_process_ip: 127.0.0.1\nmpirun_config:\n  mpirun_hostfile: /home/user/hostfile\n";
  CHECK(error({"launch", "--config_file", "acc.yaml", "t.py"}, yaml).rfind(
            "acc.yaml:7:3: mpirun_config: accelerate runs mpirun for this; dtlaunch starts the CPU processes itself", 0) == 0);
  // left at its default ({}), it is no mpirun run
  CHECK(ok({"--config_file", "acc.yaml", "t.py"}, "distributed_type: MULTI_CPU\nnum_processes: 2\nmpirun_config: {}\n")
            .nproc_per_node.count == 2);
}
