#include <catch2/catch.hpp>
#include <csignal>
#include <map>

#include "config/command_line.h"

using namespace dtl::config;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ParseResult parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return parse_command_line(args, env_of(std::move(env)));
}

/// The error's message (without "dtlaunch: error: ", which main.cc adds), or why there is none.
std::string error_of(const ParseResult& r) {
  if (r) return "(no error; output: " + r->output + ")";
  CHECK(r.error().exit_code == 2);
  return r.error().message;
}

LaunchOptions ok(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  auto r = parse(std::move(args), std::move(env));
  INFO(error_of(r));
  REQUIRE(r.value().options);
  return *r->options;
}

}  // namespace

TEST_CASE("underscore and dash spellings are the same flag") {
  CHECK(ok({"--nproc_per_node=4", "train.py"}).nproc_per_node.count == 4);
  CHECK(ok({"--nproc-per-node=4", "train.py"}).nproc_per_node.count == 4);
  CHECK(ok({"--nproc-per-node", "3", "train.py"}).nproc_per_node.count == 3);
  CHECK(ok({"--max-restarts=2", "--master-port", "0", "train.py"}).max_restarts == 2);
}

TEST_CASE("everything after the program is passed through untouched") {
  auto o = ok({"--nproc_per_node=2", "train.py", "--nproc_per_node=9", "-m", "--", "x"});
  CHECK(o.program == "train.py");
  CHECK(o.program_args == std::vector<std::string>{"--nproc_per_node=9", "-m", "--", "x"});
  CHECK(o.nproc_per_node.count == 2);
}

TEST_CASE("PET variables configure flags that were not given, and flags win") {
  auto o = ok({"train.py"}, {{"PET_NPROC_PER_NODE", "gpu"}, {"PET_MAX_RESTARTS", "3"}, {"PET_STANDALONE", "1"}});
  CHECK(o.nproc_per_node.kind == NprocSpec::Kind::gpu);
  CHECK(o.max_restarts == 3);
  CHECK(o.standalone);
  CHECK(ok({"--max_restarts=1", "train.py"}, {{"PET_MAX_RESTARTS", "3"}}).max_restarts == 1);
  CHECK_FALSE(ok({"train.py"}, {{"PET_STANDALONE", "0"}}).standalone);
}

TEST_CASE("the shutdown timeout: default 30, torch's variable, flag beats variable, 0 allowed, negative rejected") {
  CHECK(ok({"t.py"}).shutdown_timeout_s == 30);
  CHECK(ok({"t.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout_s == 7);
  CHECK(ok({"t.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}, {"PET_SHUTDOWN_TIMEOUT", "5"}}).shutdown_timeout_s == 5);
  CHECK(ok({"--shutdown_timeout=2", "t.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout_s == 2);
  CHECK(ok({"--shutdown_timeout=0", "t.py"}).shutdown_timeout_s == 0);
  auto r = parse({"--shutdown_timeout=-1", "t.py"});
  CHECK(error_of(r) == "--shutdown_timeout: expected seconds >= 0 (got '-1')");
}

TEST_CASE("nproc_per_node takes a count or gpu, cpu, auto") {
  CHECK(parse_nproc("8").count == 8);
  CHECK(parse_nproc("cpu").kind == NprocSpec::Kind::cpu);
  CHECK(parse_nproc("auto").kind == NprocSpec::Kind::auto_);
  for (const char* bad : {"0", "-1", "abc", "", "2x", "1.5"}) {
    CHECK_THROWS_AS(parse_nproc(bad), std::invalid_argument);
  }
}

TEST_CASE("redirects and tee take one value or local_rank:value pairs") {
  auto all = parse_streams("3");
  CHECK(all.for_rank(5) == Streams::both);
  auto pairs = parse_streams("0:1,1:2");
  CHECK(pairs.for_rank(0) == Streams::out);
  CHECK(pairs.for_rank(1) == Streams::err);
  CHECK(pairs.for_rank(2) == Streams::none);
  CHECK_THROWS_AS(parse_streams("4"), std::invalid_argument);
  CHECK_THROWS_AS(parse_streams("0:1,x"), std::invalid_argument);
}

TEST_CASE("signals are named with or without SIG") {
  CHECK(parse_signal_list("SIGTERM,int,HUP") == std::vector<int>{SIGTERM, SIGINT, SIGHUP});
  CHECK_THROWS_AS(parse_signal_list("SIGFOO"), std::invalid_argument);
}

TEST_CASE("gpu ids are distinct indices") {
  CHECK(parse_gpu_ids("0, 2") == std::vector<int>{0, 2});
  CHECK_THROWS_WITH(parse_gpu_ids("1,1"), "GPU 1 is listed twice");
  CHECK_THROWS_AS(parse_gpu_ids("a"), std::invalid_argument);
}

TEST_CASE("module and no_python together are refused") {
  auto r = parse({"-m", "--no_python", "pkg"});
  CHECK(error_of(r) == "--module: --module runs python -m and cannot be combined with --no_python");
}

TEST_CASE("an unknown option before the program is an error, not the program") {
  auto r = parse({"--nprocs=2", "train.py"});
  CHECK(error_of(r) == "unknown option --nprocs=2 (see dtlaunch --help)");
}

TEST_CASE("rdzv_id is an alias of run_id, and standalone is a flag") {
  CHECK(ok({"--rdzv_id=j1", "t.py"}).run_id == "j1");
  CHECK(ok({"--run_id=j2", "--rdzv-id=j1", "t.py"}).run_id == "j2");
  CHECK(ok({"t.py"}).run_id == "none");
  CHECK(ok({"--standalone", "t.py"}).standalone);
}

TEST_CASE("a run id too long to name the log folder is bad input, from either spelling") {
  CHECK(ok({"--run_id=" + std::string(248, 'j'), "t.py"}).run_id.size() == 248);
  CHECK(error_of(parse({"--run_id=" + std::string(249, 'j'), "t.py"})) ==
        "--run_id: expected at most 248 bytes (it names the log folder) (got '" + std::string(249, 'j') + "')");
  CHECK_THAT(error_of(parse({"--rdzv_id=" + std::string(300, 'j'), "t.py"})),
             Catch::StartsWith("--rdzv_id: expected at most 248 bytes (it names the log folder) (got 'jjj"));
}

TEST_CASE("fake gpus come from the flag or DTLAUNCH_FAKE_GPUS") {
  CHECK(*ok({"--fake_gpus=2", "t.py"}).fake_gpus == 2);
  CHECK(*ok({"t.py"}, {{"DTLAUNCH_FAKE_GPUS", "3"}}).fake_gpus == 3);
  CHECK_FALSE(ok({"t.py"}).fake_gpus);
}

TEST_CASE("a flag given twice takes its last value, as torchrun's argparse does") {
  CHECK(ok({"--nproc_per_node", "1", "--nproc_per_node", "2", "train.py"}).nproc_per_node.count == 2);
  CHECK(ok({"--nproc_per_node=1", "--nproc-per-node=3", "train.py"}).nproc_per_node.count == 3);
  CHECK(ok({"--max_restarts=1", "--max_restarts=4", "train.py"}).max_restarts == 4);
}

TEST_CASE("rdzv_conf durations below the millisecond the timers count in are refused") {
  // 0.0001 s became a 0 ms heartbeat interval: the node dropped its own rendezvous at once
  CHECK_THROWS_WITH(parse_rdzv_conf("keep_alive_interval=0.0001"),
                    "keep_alive_interval expects seconds >= 0.001 (got '0.0001')");
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout=0"), "join_timeout expects seconds >= 0.001 (got '0')");
  CHECK_THROWS_WITH(parse_rdzv_conf("timeout=0", true), "timeout expects seconds >= 0.001 (got '0')");
  CHECK(parse_rdzv_conf("keep_alive_interval=0.001").keep_alive_interval_s == Approx(0.001));
  CHECK(parse_rdzv_conf("last_call_timeout=0.2").last_call_timeout_s == Approx(0.2));
}

TEST_CASE("an option written --flag= has an empty value, it does not take the next argument") {
  // CLI11 read `--role= --no_python ./w` as role '--no_python' and then ran ./w through python
  CHECK(error_of(parse({"--role=", "--no_python", "./w"})) == "--role: expected a non-empty role name");
  auto o = ok({"--log_dir=", "--no_python", "./w"});
  CHECK(o.log_dir.empty());
  CHECK(o.no_python);
  CHECK(o.program == "./w");
  CHECK(ok({"--rdzv_endpoint=", "--nnodes=2", "train.py"}).max_nodes == 2);  // empty: not given
  auto r = parse({"--nproc_per_node=", "train.py"});
  CHECK(error_of(r).rfind("--nproc_per_node: expected", 0) == 0);
  // after the program, `--x=` belongs to the program
  CHECK(ok({"train.py", "--suffix=", "--x"}).program_args == std::vector<std::string>{"--suffix=", "--x"});
}

TEST_CASE("a short option takes its value after '=' too, as torchrun's argparse does") {
  CHECK(ok({"-r=3", "train.py"}).redirects.all == Streams::both);
  CHECK(ok({"-t=1", "train.py"}).tee.all == Streams::out);
  CHECK(ok({"-t", "2", "-r3", "train.py"}).tee.all == Streams::err);
}

TEST_CASE("an rdzv_conf item without '=' is named once") {
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout=3,foo"), "'foo' is not key=value");
  CHECK(error_of(parse({"--nnodes=2", "--rdzv_conf=join_timeout", "train.py"})) ==
        "--rdzv_conf: 'join_timeout' is not key=value");
}

TEST_CASE("each setting records its source: the flag as typed, the variable that gave it, or the default") {
  auto o = ok({"--nproc-per-node=3", "-m", "--max_restarts", "2", "pkg"}, {{"PET_ROLE", "r"}, {"PET_MAX_RESTARTS", "5"}});
  CHECK(o.source(Setting::nproc_per_node).kind == Source::Kind::flag);
  CHECK(o.source(Setting::nproc_per_node).where == "--nproc-per-node");
  CHECK(o.source(Setting::module).where == "--module");  // a short option is named by its long spelling
  CHECK(o.source(Setting::max_restarts).where == "--max_restarts");
  CHECK(o.source(Setting::role).kind == Source::Kind::env);
  CHECK(o.source(Setting::role).where == "PET_ROLE");
  CHECK(o.source(Setting::tee).kind == Source::Kind::default_);
  CHECK(o.named(Setting::nproc_per_node, "3") == "--nproc-per-node=3");
  // the last spelling typed is the one that gave the value
  CHECK(ok({"--nproc_per_node=1", "--nproc-per-node=2", "t.py"}).source(Setting::nproc_per_node).where == "--nproc-per-node");
}

TEST_CASE("an error names the flag as the user typed it") {
  CHECK(error_of(parse({"--nproc-per-node=0", "t.py"})) ==
        "--nproc-per-node: expected a positive integer or one of gpu, cpu, auto (got '0')");
  CHECK(error_of(parse({"--shutdown-timeout", "-1", "t.py"})) == "--shutdown-timeout: expected seconds >= 0 (got '-1')");
}

TEST_CASE("the token's variables are resolved like any other: PET_RDZV_TOKEN, then DTLAUNCH_RDZV_TOKEN") {
  auto o = ok({"t.py"}, {{"DTLAUNCH_RDZV_TOKEN", "d"}});
  CHECK(o.rdzv_token == "d");
  CHECK(o.source(Setting::rdzv_token).kind == Source::Kind::env);
  CHECK(o.source(Setting::rdzv_token).where == "DTLAUNCH_RDZV_TOKEN");
  o = ok({"t.py"}, {{"DTLAUNCH_RDZV_TOKEN", "d"}, {"PET_RDZV_TOKEN", "p"}});
  CHECK(o.rdzv_token == "p");
  CHECK(o.source(Setting::rdzv_token).where == "PET_RDZV_TOKEN");
  o = ok({"--rdzv-token=f", "t.py"}, {{"DTLAUNCH_RDZV_TOKEN", "d"}});
  CHECK(o.rdzv_token == "f");
  CHECK(o.source(Setting::rdzv_token).kind == Source::Kind::flag);
}

TEST_CASE("use_cpu against nproc_per_node=gpu is refused whatever gave each") {
  CHECK(error_of(parse({"--use_cpu", "--nproc_per_node=gpu", "t.py"})) ==
        "--nproc_per_node: expected a count, cpu or auto, since use_cpu is set (--use_cpu) (got 'gpu')");
  CHECK(error_of(parse({"--nproc_per_node=gpu", "t.py"}, {{"ACCELERATE_USE_CPU", "true"}})) ==
        "--nproc_per_node: expected a count, cpu or auto, since use_cpu is set (ACCELERATE_USE_CPU) (got 'gpu')");
}

TEST_CASE("more workers than gpu_ids lists is refused while parsing, for flags as for files") {
  // Before, only a file's values were checked here; flags waited for the plan, so --print_config
  // showed settings that could not launch.
  CHECK(error_of(parse({"--gpu_ids=0,1", "--nproc_per_node=3", "--print_config"})) ==
        "--nproc_per_node=3 is more than the 2 GPUs listed in --gpu_ids=0,1");
  CHECK(error_of(parse({"--nproc_per_node=3", "--print_config"}, {{"PET_GPU_IDS", "1,3"}})) ==
        "--nproc_per_node=3 is more than the 2 GPUs listed in gpu_ids=1,3 (from PET_GPU_IDS)");
  CHECK(ok({"--gpu_ids=0,1", "--nproc_per_node=2", "t.py"}).gpu_ids == std::vector<int>{0, 1});
}

TEST_CASE("a command's settings are read as dtlaunch reads them, and the settings it does not take keep their defaults") {
  std::vector<dtl::config::CommandOption> own = {{"--host", "where", {}}};
  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "PET_RDZV_TOKEN") return "s";
    if (k == "PET_NPROC_PER_NODE") return "x";  // not taken: neither read nor an error
    return std::nullopt;
  };
  auto none = [](const std::string&) { return dtl::config::FileRead{dtl::config::FileRead::Status::missing, "none"}; };
  auto r = dtl::config::parse_command_settings("dtlaunch cmd", "a test", {Setting::rdzv_token, Setting::nnodes},
                                          {{Setting::rdzv_backend, "c10d"}}, own, {"--host=h", "--nnodes", "2"}, env, none);
  REQUIRE(r.value().options);
  CHECK(r->options->rdzv_token == "s");
  CHECK(r->options->source(Setting::rdzv_token).where == "PET_RDZV_TOKEN");
  CHECK(r->options->max_nodes == 2);
  CHECK(r->options->source(Setting::nproc_per_node).kind == Source::Kind::default_);
  CHECK(r->options->rdzv_backend == "c10d");  // the command's own default
  CHECK(own[0].value == "h");
  auto bad = dtl::config::parse_command_settings("dtlaunch cmd", "a test", {Setting::nnodes}, {}, own,
                                            {"--nproc_per_node=2"}, env, none);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::EndsWith("(see dtlaunch cmd --help)"));
}

TEST_CASE("torch.distributed.launch's word: --local-rank=N unless --use_env; deepspeed's: --local_rank=N and its variables") {
  using Arg = LaunchOptions::LocalRankArg;
  CHECK(ok({"t.py"}).local_rank_arg == Arg::none);
  CHECK(ok({"torch.distributed.launch", "t.py"}).local_rank_arg == Arg::torch_version);
  CHECK(ok({"torch.distributed.launch", "--use_env", "t.py"}).local_rank_arg == Arg::none);
  CHECK(ok({"torch.distributed.launch", "t.py"}).gpu_visibility == GpuVisibility::all);
  auto ds = ok({"deepspeed", "--num_gpus", "2", "--num_nodes=1", "t.py"});
  CHECK(ds.local_rank_arg == Arg::underscore);
  CHECK(ds.deepspeed_variables);
  CHECK(ds.nproc_per_node.count == 2);
  CHECK(ok({"deepspeed", "t.py"}).nproc_per_node.kind == NprocSpec::Kind::gpu_or_one);
  CHECK(ok({"deepspeed", "--no_local_rank", "t.py"}).local_rank_arg == Arg::none);
  CHECK_FALSE(ok({"--num_gpus=2", "t.py"}).deepspeed_variables);  // the alias alone changes nothing else
}

TEST_CASE("a long flag's unambiguous prefix is the flag, as torchrun's argparse takes it") {
  // PyTorch's own launcher tests pass --redirect=3; torchrun takes --nproc_per and --max_restart too
  CHECK(ok({"--nproc_per=2", "train.py"}).nproc_per_node.count == 2);
  CHECK(ok({"--nproc_per", "3", "train.py"}).nproc_per_node.count == 3);
  CHECK(ok({"--max_restart=1", "--redirect=3", "train.py"}).max_restarts == 1);
  CHECK(ok({"--redirect", "3", "train.py"}).redirects.all == Streams::both);
  CHECK(ok({"--standal", "train.py"}).standalone);
  // dtlaunch's own flags take prefixes too, once torchrun's have none
  CHECK(ok({"--fake_gpu=2", "--nproc_per_node=gpu", "train.py"}).fake_gpus == 2);
  // errors name the flag in full
  CHECK(error_of(parse({"--max_restart=x", "train.py"})) == "--max_restarts: expected an integer >= 0 (got 'x')");
  // after the program, a prefix is the program's
  CHECK(ok({"train.py", "--nproc_per=9"}).program_args == std::vector<std::string>{"--nproc_per=9"});
}

TEST_CASE("a prefix that argparse calls ambiguous is refused in one line that names the candidates") {
  CHECK(error_of(parse({"--nproc=2", "train.py"})) ==
        "ambiguous option: --nproc could match --nproc-per-node, --nproc_per_node (see dtlaunch --help)");
  CHECK(error_of(parse({"--rdzv", "x", "train.py"})).rfind("ambiguous option: --rdzv could match --rdzv-backend, ", 0) == 0);
  // accelerate launch's argparse takes no prefix (allow_abbrev=False): dtlaunch launch neither
  CHECK(error_of(parse({"launch", "--num_proc=2", "train.py"})).rfind("unknown option --num_proc=2", 0) == 0);
  CHECK(ok({"launch", "--num_processes=2", "train.py"}).nproc_per_node.count == 2);
}

TEST_CASE("rdzv_conf keys have torch's meaning for the backend, and the keys torch ignores are named") {
  std::vector<std::string> ignored;
  // static: torch's handler waits `timeout` (900 s by default) and reads nothing else
  auto conf = parse_rdzv_conf("timeout=5,join_timeout=7", true, &ignored);
  CHECK(conf.join_timeout(true) == 5);
  CHECK(ignored == std::vector<std::string>{"'join_timeout' (the static backend waits `timeout` seconds, as torch's: "
                                            "join_timeout is c10d's)"});
  CHECK(parse_rdzv_conf("").join_timeout(true) == 900);
  // c10d: join_timeout; `timeout` and unknown keys are ignored, quotes included (torch reads 'join_timeout as a key)
  ignored.clear();
  conf = parse_rdzv_conf("'join_timeout=5,last_call_timeout=1,timeout=5'", false, &ignored);
  CHECK(conf.join_timeout(false) == 600);
  CHECK(conf.last_call_timeout_s == 1);
  REQUIRE(ignored.size() == 2);
  CHECK(ignored[0] == "''join_timeout' (torch's rendezvous reads no such key)");
  CHECK(ignored[1].rfind("'timeout' (the c10d backend waits join_timeout", 0) == 0);
  // the keys torch reads are checked as torch checks them, even when dtlaunch has no use for them
  CHECK_NOTHROW(parse_rdzv_conf("read_timeout=60,heartbeat_timeout=5,cas_backoff_max_seconds=0.5,store_type=tcp"));
  CHECK_THROWS_WITH(parse_rdzv_conf("store_type=file"), "store_type=file: dtlaunch's rendezvous is served over TCP only");
  CHECK_THROWS_WITH(parse_rdzv_conf("join_timeout= "), "join_timeout has no value");
}

TEST_CASE("the rdzv_conf keys torch ignores come back as warnings that name where they were given") {
  auto r = parse({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29400", "--rdzv-conf=timeout=5,x=1",
                  "train.py"});
  REQUIRE(r.value().options);
  CHECK(r->options->rdzv_conf.join_timeout(false) == 600);
  REQUIRE(r->warnings.size() == 2);
  CHECK(r->warnings[1] == "--rdzv-conf: ignoring 'x' (torch's rendezvous reads no such key)");
  r = parse({"train.py"}, {{"PET_RDZV_CONF", "y=1"}});
  REQUIRE(r);
  CHECK(r->warnings == std::vector<std::string>{"PET_RDZV_CONF: ignoring 'y' (torch's rendezvous reads no such key)"});
}

TEST_CASE("torchrun's logs_specs entry point `default` is taken, another is refused") {
  CHECK(ok({"--logs_specs=default", "train.py"}).program == "train.py");
  CHECK(ok({"--logs-specs", "default", "train.py"}).program == "train.py");
  CHECK(error_of(parse({"--logs_specs=my.Specs", "train.py"})).rfind("--logs_specs: expected default, torchrun's built-in", 0) == 0);
}

TEST_CASE("every setting has its row in the flag table, and so a name") {
  for (int i = 0; i <= static_cast<int>(Setting::fp8_pad_inner_dim); ++i) {
    INFO(i);
    CHECK(setting_name(static_cast<Setting>(i)) != "?");
  }
  CHECK(setting_name(Setting::export_) == "export");
  CHECK(LaunchOptions{}.source(Setting::max_restarts).where == "--max_restarts");  // unset: its flag
}
