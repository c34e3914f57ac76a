#include <catch2/catch.hpp>

#include <map>

#include "apps/dtl-train/options.h"

using namespace dtl::train;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

ParseResult parse(std::vector<std::string> args, std::map<std::string, std::string> vars = {}) {
  return parse_train_args(args, env_of(std::move(vars)));
}

}  // namespace

TEST_CASE("dtl-train: flags given on the command line override the preset, wherever the preset appears") {
  auto r = parse({"--width", "48", "--preset", "tiny", "--heads=2"});
  REQUIRE(r.options);
  CHECK(r.options->model.layers == 2);
  CHECK(r.options->model.width == 48);
  CHECK(r.options->model.heads == 2);
  CHECK(r.options->model.context == 32);
}

TEST_CASE("dtl-train: the default preset has about ten million parameters and gpt2-small GPT-2's count") {
  auto d = parse({});
  REQUIRE(d.options);
  CHECK(parameter_count(d.options->model) == 10'795'008);
  auto g = parse({"--preset", "gpt2-small"});
  REQUIRE(g.options);
  // GPT-2 small has 124,439,808 parameters with its 50257-token vocabulary; 50304 adds 47 rows.
  CHECK(parameter_count(g.options->model) == 124'439'808 + 47 * 768);
  CHECK(flops_per_token(g.options->model) > 6.0 * 124e6);
}

TEST_CASE("dtl-train: impossible shapes and values are one line each") {
  CHECK(parse({"--width", "64", "--heads", "5"}).output == "dtl-train: error: --heads 5 does not divide --width 64");
  CHECK(parse({"--grad_accum", "0"}).output == "dtl-train: error: --grad_accum must be >= 1 (got 0)");
  CHECK(parse({"--data", "x.txt", "--vocab", "100"}).output ==
        "dtl-train: error: --data is read as bytes and needs --vocab >= 256 (got 100)");
  CHECK(parse({"--mixed_precision", "fp32"}).output ==
        "dtl-train: error: --mixed_precision must be no, bf16 or fp16 (got 'fp32')");
  CHECK(parse({"--loss_scale", "static"}).output ==
        "dtl-train: error: --loss_scale must be auto, dynamic or none (got 'static')");
  CHECK(parse({"--fail_how", "nonfinite"}).options);
  CHECK(parse({"--kernels", "mkl"}).output == "dtl-train: error: --kernels must be fused or torch (got 'mkl')");
  CHECK(parse({"--kernels", "torch"}).options->kernels == "torch");
  CHECK(parse({}).options->kernels == "fused");
  CHECK(parse({"--cpu_kernels", "torch"}).options->kernels == "torch");  // its name before it chose CUDA's too
  CHECK(parse({"--attention", "fast"}).output ==
        "dtl-train: error: --attention must be auto, cudnn, flash, efficient or math (got 'fast')");
  CHECK(parse({}).options->attention == "auto");
  CHECK(parse({"--attention", "cudnn"}).options->attention == "cudnn");
  CHECK(parse({"--fail_how", "explode"}).exit_code == 2);
  auto unknown = parse({"--lr", "1e-3", "--lrr", "2"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output == "dtl-train: error: unknown option --lrr (see dtl-train --help)");
  CHECK(parse({"--steps", "3", "data.txt"}).output == "dtl-train: error: unexpected argument 'data.txt' (see dtl-train --help)");
}

TEST_CASE("dtl-train: ACCELERATE_MIXED_PRECISION is used unless the flag is given") {
  CHECK(parse({}, {{"ACCELERATE_MIXED_PRECISION", "bf16"}}).options->mixed_precision == "bf16");
  CHECK(parse({"--mixed_precision", "no"}, {{"ACCELERATE_MIXED_PRECISION", "bf16"}}).options->mixed_precision == "no");
  auto fp16 = parse({}, {{"ACCELERATE_MIXED_PRECISION", "fp16"}});
  REQUIRE(fp16.options);
  CHECK(fp16.options->mixed_precision == "fp16");
  CHECK(fp16.options->loss_scale == "auto");  // dynamic, for fp16
  CHECK(fp16.options->sources.at("mixed_precision") == "ACCELERATE_MIXED_PRECISION");
  auto fp8 = parse({}, {{"ACCELERATE_MIXED_PRECISION", "fp8"}});
  CHECK(fp8.exit_code == 2);
  CHECK(fp8.output == "dtl-train: error: ACCELERATE_MIXED_PRECISION=fp8 is not supported (use no, bf16 or fp16)");
}

TEST_CASE("dtl-train: accelerate's variables give grad_accum, grad_clip and FSDP's checkpointing; flags win") {
  const std::map<std::string, std::string> acc = {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                                                  {"ACCELERATE_GRADIENT_CLIPPING", "0.5"},
                                                  {"ACCELERATE_USE_FSDP", "true"},
                                                  {"FSDP_SHARDING_STRATEGY", "NO_SHARD"},
                                                  {"FSDP_ACTIVATION_CHECKPOINTING", "true"}};
  auto r = parse({}, acc);
  REQUIRE(r.options);
  CHECK(r.options->grad_accum == 4);
  CHECK(r.options->grad_clip == 0.5);
  CHECK(r.options->activation_checkpointing);
  CHECK(r.options->sources.at("grad_accum") == "ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
  CHECK(r.options->sources.at("activation_checkpointing") == "FSDP_ACTIVATION_CHECKPOINTING");
  CHECK(r.options->sources.at("mixed_precision") == "default");
  auto flags = parse({"--grad_accum", "2", "--grad_clip=0", "--activation_checkpointing=false"}, acc);
  REQUIRE(flags.options);
  CHECK(flags.options->grad_accum == 2);
  CHECK(flags.options->grad_clip == 0);
  CHECK_FALSE(flags.options->activation_checkpointing);
  CHECK(flags.options->sources.at("grad_clip") == "--grad_clip");
  // FSDP's variable counts only in an FSDP run, as accelerate reads it; "auto" clipping is the default.
  auto no_fsdp = parse({}, {{"FSDP_ACTIVATION_CHECKPOINTING", "true"}, {"ACCELERATE_GRADIENT_CLIPPING", "auto"}});
  CHECK_FALSE(no_fsdp.options->activation_checkpointing);
  CHECK(no_fsdp.options->grad_clip == 1.0);
}

TEST_CASE("dtl-train: a bad accelerate variable or a sharded run is one line naming the variable") {
  CHECK(parse({}, {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "0"}}).output ==
        "dtl-train: error: ACCELERATE_GRADIENT_ACCUMULATION_STEPS=0: expected an integer >= 1");
  CHECK(parse({}, {{"ACCELERATE_GRADIENT_CLIPPING", "-1"}}).output ==
        "dtl-train: error: ACCELERATE_GRADIENT_CLIPPING=-1: expected a number >= 0");
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "NO_SHARD"},
                   {"FSDP_ACTIVATION_CHECKPOINTING", "maybe"}})
            .output == "dtl-train: error: FSDP_ACTIVATION_CHECKPOINTING=maybe: expected true or false");
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "two"}}).output ==
        "dtl-train: error: ACCELERATE_DEEPSPEED_ZERO_STAGE=two: expected 0, 1, 2 or 3");
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "HYBRID_SHARD"}}).output ==
        "dtl-train: error: FSDP_SHARDING_STRATEGY=HYBRID_SHARD: dtl-train shards over every rank (FULL_SHARD, "
        "SHARD_GRAD_OP) or not at all (NO_SHARD), not within a node");
  CHECK(parse({"--zero", "4"}).output == "dtl-train: error: --zero must be 0, 1, 2 or 3 (got 4)");
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme"}})
            .output ==
        "dtl-train: error: ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=nvme: dtl-train offloads the optimizer to host "
        "memory (cpu), not to NVMe");
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "disk"}})
            .output == "dtl-train: error: ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=disk: expected none, cpu or nvme");
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"},
                   {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu"}})
            .output ==
        "dtl-train: error: ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=cpu: dtl-train keeps the parameters on its device "
        "(it offloads only the optimizer: offload_optimizer_device)");
  // Below stage 3 DeepSpeed does not offload parameters either.
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"},
                   {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu"}})
            .options);
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_OFFLOAD_PARAMS", "maybe"}}).output ==
        "dtl-train: error: FSDP_OFFLOAD_PARAMS=maybe: expected true or false");
  // The flag wins over the file's NVMe.
  CHECK(parse({"--offload_optimizer", "cpu"},
              {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme"}})
            .options);
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_OFFLOAD_PARAMS", "true"}}).output ==
        "dtl-train: error: FSDP_OFFLOAD_PARAMS=true: dtl-train keeps the parameters on its device (it offloads only "
        "the optimizer, in a DeepSpeed run or with --offload_optimizer cpu)");
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_OFFLOAD_PARAMS", "false"}}).options);
  CHECK(parse({"--offload_optimizer", "gpu"}).output ==
        "dtl-train: error: --offload_optimizer must be none or cpu (got 'gpu')");
}

TEST_CASE("dtl-train: the optimizer's offload comes from accelerate's DeepSpeed variable unless the flag is given") {
  const std::map<std::string, std::string> cpu{{"ACCELERATE_USE_DEEPSPEED", "true"},
                                               {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"},
                                               {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu"}};
  auto from_env = parse({}, cpu);
  REQUIRE(from_env.options);
  CHECK(from_env.options->offload_optimizer == "cpu");
  CHECK(from_env.options->sources.at("offload_optimizer") == "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE");
  auto flag = parse({"--offload_optimizer", "none"}, cpu);
  REQUIRE(flag.options);
  CHECK(flag.options->offload_optimizer == "none");
  CHECK(flag.options->sources.at("offload_optimizer") == "--offload_optimizer");
  // accelerate reads the variable only in a DeepSpeed run (its DeepSpeedPlugin); so does dtl-train.
  auto plain = parse({}, {{"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu"}});
  REQUIRE(plain.options);
  CHECK(plain.options->offload_optimizer == "none");
  CHECK(plain.options->sources.at("offload_optimizer") == "default");
}

TEST_CASE("dtl-train: the ZeRO stage comes from accelerate's DeepSpeed or FSDP variables unless --zero is given") {
  auto ds = parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"}});
  REQUIRE(ds.options);
  CHECK(ds.options->zero == 2);
  CHECK(ds.options->sources.at("zero") == "ACCELERATE_DEEPSPEED_ZERO_STAGE");
  auto fsdp = parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}});
  CHECK(fsdp.options->zero == 2);
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "3"}}).options->zero == 0);
  // FULL_SHARD, accelerate's default (unset, or its number 1), is stage 3; so is DeepSpeed's 3.
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}}).options->zero == 3);
  CHECK(parse({}, {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "1"}}).options->zero == 3);
  CHECK(parse({}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"}}).options->zero == 3);
  auto flag = parse({"--zero", "1"}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"}});
  CHECK(flag.options->zero == 1);
  CHECK(flag.options->sources.at("zero") == "--zero");
  // Without ACCELERATE_USE_DEEPSPEED the stage variable is not accelerate's word for this run.
  CHECK(parse({}, {{"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"}}).options->zero == 0);
}

TEST_CASE("dtl-train: --consolidate takes a checkpoint folder and an output folder, beside the model flags") {
  auto r = parse({"--consolidate", "ck", "out", "--preset", "tiny"});
  REQUIRE(r.options);
  CHECK(r.options->consolidate == std::vector<std::string>{"ck", "out"});
  CHECK(r.options->model.width == parse({"--preset", "tiny"}).options->model.width);
  CHECK(parse({}).options->consolidate.empty());
  auto one = parse({"--consolidate", "ck"});
  CHECK(one.exit_code == 2);
  CHECK(one.output.rfind("dtl-train: error: --consolidate", 0) == 0);
}

TEST_CASE("dtl-train: --help prints the flags and exits 0") {
  auto r = parse({"--help"});
  CHECK_FALSE(r.options);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("--grad_accum") != std::string::npos);
}

TEST_CASE("dtl-train: the launcher's variables are read, and a single process needs none") {
  auto alone = read_launch_env(env_of({}));
  CHECK(alone.rank == 0);
  CHECK(alone.world_size == 1);
  CHECK(alone.master_port == 0);
  auto e = read_launch_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.2"},
                                   {"MASTER_PORT", "29501"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                                   {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"}, {"GLOO_SOCKET_IFNAME", "eth0,eth1"}}));
  CHECK(e.rank == 3);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.2");
  CHECK(e.master_port == 29501);
  CHECK(e.restart_count == 2);
  CHECK(e.error_file == "/tmp/e.json");
  CHECK(e.gloo_ifnames == std::vector<std::string>{"eth0", "eth1"});
}

TEST_CASE("dtl-train: bad launcher variables name the variable and the value") {
  CHECK_THROWS_WITH(read_launch_env(env_of({{"RANK", "x"}})), "RANK: expected an integer >= 0 (got 'x')");
  CHECK_THROWS_WITH(read_launch_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})),
                    "RANK=2 is not below WORLD_SIZE=2");
  CHECK_THROWS_WITH(read_launch_env(env_of({{"WORLD_SIZE", "2"}})),
                    "WORLD_SIZE=2 but MASTER_PORT is not set (start dtl-train with dtlaunch or torchrun)");
}

TEST_CASE("dtl-train: a rank drives its own GPU, or the only one the launcher left it") {
  CHECK(cuda_index_for(3, 8) == 3);
  CHECK(cuda_index_for(3, 1) == 0);
  CHECK(cuda_index_for(0, 1) == 0);
  CHECK(cuda_index_for(3, 2) == -1);
}
