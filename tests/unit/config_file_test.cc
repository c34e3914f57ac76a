#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/command_line.h"
#include "config/config_file.h"
#include "fake_env.h"

using namespace dtl::config;
using dtl::test::env_of;
using dtl::test::files_of;

namespace {

using Vars = std::map<std::string, std::string>;

ParseResult parse_with(const std::string& yaml, std::vector<std::string> args, Vars vars = {}) {
  args.insert(args.begin(), {"--config_file", "cfg.yaml"});
  return parse_command_line(args, env_of(std::move(vars)), files_of({{"cfg.yaml", yaml}}));
}

LaunchOptions ok(const std::string& yaml, std::vector<std::string> args = {"train.py"}, Vars vars = {}) {
  auto r = parse_with(yaml, std::move(args), std::move(vars));
  INFO((r ? r->output : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

/// The one error line (without "dtlaunch: error: ", which main.cc adds).
std::string error(const std::string& yaml, std::vector<std::string> args = {"train.py"}, Vars vars = {}) {
  auto r = parse_with(yaml, std::move(args), std::move(vars));
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  CHECK(r.error().message.find('\n') == std::string::npos);
  return r.error().message;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Compares `got` with the golden file. With DTL_UPDATE_GOLDEN set it rewrites the file instead and
/// fails, so that a run with the variable set can never pass by comparing what it just wrote.
void check_golden(const std::filesystem::path& expected_path, const std::string& got) {
  if (std::getenv("DTL_UPDATE_GOLDEN") == nullptr) {
    CHECK(got == read_text(expected_path));
    return;
  }
  std::ofstream(expected_path) << got;
  FAIL_CHECK("DTL_UPDATE_GOLDEN is set: rewrote " << expected_path.string()
                                                  << " instead of checking it; review git diff, then run without it");
}

/// `# test-args: a b` and `# test-env: K=V K2=V2` lines of a golden input.
std::vector<std::string> directive(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# " + name + ":", 0) != 0) continue;
    std::istringstream words(line.substr(name.size() + 3));
    std::string w;
    while (words >> w) out.push_back(w);
  }
  return out;
}

}  // namespace

TEST_CASE("golden: each config file gives the settings that --print_config shows") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(DTL_GOLDEN_DIR) / "config";
  std::vector<fs::path> inputs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") inputs.push_back(entry.path());
  }
  std::sort(inputs.begin(), inputs.end());
  REQUIRE(inputs.size() >= 8);
  for (const auto& input : inputs) {
    const std::string name = input.filename().string();
    const std::string text = read_text(input);
    std::vector<std::string> args{"--config_file", name, "--print_config"};
    for (const auto& a : directive(text, "test-args")) args.push_back(a);
    Vars vars;
    for (const auto& kv : directive(text, "test-env")) vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    auto r = parse_command_line(args, env_of(vars), files_of({{name, text}}));
    fs::path expected_path = input;
    expected_path.replace_extension(".expected");
    INFO(name << " (DTL_UPDATE_GOLDEN=1 unit_tests rewrites the .expected files)");
    INFO((r ? "" : r.error().message));
    CHECK(r);
    if (!r) continue;
    std::string got = r->output;
    for (const auto& w : r->warnings) got += "warning: " + w + "\n";
    check_golden(expected_path, got);
  }
}

TEST_CASE("precedence is one rule for every key: flag, then variable, then file, then default") {
  const std::string yaml = "nproc_per_node: 2\nmax_restarts: 4\nfake_gpus: 3\nrole: fromfile\n";
  auto o = ok(yaml);
  CHECK(o.nproc_per_node.count == 2);
  CHECK(o.max_restarts == 4);
  CHECK(o.fake_gpus == 3);
  CHECK(o.role == "fromfile");
  CHECK(o.config_file == "cfg.yaml");
  o = ok(yaml, {"train.py"}, {{"PET_NPROC_PER_NODE", "5"}, {"DTLAUNCH_FAKE_GPUS", "8"}});
  CHECK(o.nproc_per_node.count == 5);
  CHECK(o.fake_gpus == 8);
  CHECK(o.max_restarts == 4);
  o = ok(yaml, {"--nproc_per_node=7", "train.py"}, {{"PET_NPROC_PER_NODE", "5"}});
  CHECK(o.nproc_per_node.count == 7);
  CHECK(ok("").nproc_per_node.count == 1);
}

TEST_CASE("a switch in a file is a YAML boolean, and a flag turns it on over the file") {
  CHECK(ok("no_python: yes\n").no_python);
  CHECK(ok("no_python: true\n").no_python);
  CHECK_FALSE(ok("standalone: off\n").standalone);
  CHECK(ok("standalone: false\n", {"--standalone", "t.py"}).standalone);
  CHECK(ok("standalone: true\n", {"t.py"}, {{"PET_STANDALONE", "0"}}).standalone == false);
}

TEST_CASE("the env section is added to the workers' environment unless the variable is already set") {
  auto o = ok("env:\n  NCCL_DEBUG: INFO\n  A_FLAG: no\n  EMPTY:\n", {"t.py"}, {{"NCCL_DEBUG", "WARN"}});
  CHECK(o.extra_env == std::vector<std::pair<std::string, std::string>>{{"A_FLAG", "no"}, {"EMPTY", ""}});
}

TEST_CASE("accelerate's settings reach the workers as accelerate's variables") {
  auto o = ok("distributed_type: MULTI_GPU\nmixed_precision: no\ndebug: true\nnum_processes: 2\n");
  CHECK(o.mixed_precision == "no");
  CHECK(worker_variables(o) == std::vector<std::pair<std::string, std::string>>{
                                   {"ACCELERATE_MIXED_PRECISION", "no"}, {"ACCELERATE_DEBUG_MODE", "true"}});
  auto cpu = ok("distributed_type: MULTI_CPU\nnum_processes: 3\ngpu_ids: '0'\n");
  CHECK(cpu.use_cpu);
  CHECK_FALSE(cpu.gpu_ids);
  CHECK(cpu.nproc_per_node.count == 3);
  CHECK(worker_variables(cpu) == std::vector<std::pair<std::string, std::string>>{{"ACCELERATE_USE_CPU", "true"}});
  CHECK(worker_variables(ok("")).empty());
}

TEST_CASE("accelerate's num_processes is the total over all machines") {
  auto r = parse_with("distributed_type: MULTI_GPU\nnum_machines: 2\nmain_process_ip: h\nnum_processes: 8\n",
                      {"--print_config"});
  REQUIRE(r);
  CHECK(r->output.find("nproc_per_node: 4") != std::string::npos);
  CHECK(r->output.find("nnodes: 2") != std::string::npos);
  CHECK(ok("distributed_type: MULTI_GPU\n").nproc_per_node.kind == NprocSpec::Kind::gpu);
  CHECK(ok("distributed_type: MULTI_GPU\nnum_processes: -1\n").nproc_per_node.kind == NprocSpec::Kind::gpu);
}

TEST_CASE("YAML syntax errors and wrong types name the file, line, column and key") {
  CHECK(error("gpu_ids: [0,\n") == "cfg.yaml:2:1: YAML syntax error: end of sequence flow not found");
  CHECK(error("a: 1\n  b: 2\n") == "cfg.yaml:2:4: YAML syntax error: illegal map value");
  CHECK(error("- nproc_per_node: 2\n") ==
        "cfg.yaml:1:1: expected a map of settings (key: value lines), got a list");
  CHECK(error("just words\n") == "cfg.yaml:1:1: expected a map of settings (key: value lines), got 'just words'");
  CHECK(error("[a, b]: 1\n") == "cfg.yaml:1:1: expected a key name, got a list");
  CHECK(error("standalone: maybe\n") == "cfg.yaml:1:13: standalone: expected true or false, got 'maybe'");
  CHECK(error("nproc_per_node: [1, 2]\n") == "cfg.yaml:1:17: nproc_per_node: expected a single value, got a list");
  CHECK(error("gpu_ids: {a: 1}\n") == "cfg.yaml:1:10: gpu_ids: expected a list or a comma-separated value, got a map");
  CHECK(error("gpu_ids: [[0]]\n") == "cfg.yaml:1:10: gpu_ids: expected a list of single values, got a list");
  CHECK(error("max_restarts: 1\nrole: a\nmax_restarts: 2\n") ==
        "cfg.yaml:3:15: max_restarts: set twice (first on line 1)");
  CHECK(error("env: [A]\n") == "cfg.yaml:1:6: env: expected a map of VARIABLE: value, got a list");
  CHECK(error("env:\n  NCCL-DEBUG: 1\n") == "cfg.yaml:2:3: env: expected variable names like NCCL_DEBUG, got 'NCCL-DEBUG'");
  CHECK(error("env:\n  A: [1]\n") == "cfg.yaml:2:6: env: A: expected a single value, got a list");
}

TEST_CASE("a file of several YAML documents is an error, not the first one without a word") {
  CHECK(error("nproc_per_node: 2\n---\nnproc_per_nod: 3\n") ==
        "cfg.yaml:3:1: expected one YAML document, got a second one (after '---')");
  CHECK(error("---\n...\n---\nbogus: 1\n") == "cfg.yaml:4:1: expected one YAML document, got a second one (after '---')");
  CHECK(ok("---\nnproc_per_node: 2\n...\n").nproc_per_node.count == 2);
}

TEST_CASE("values from a file are checked like flags, and the error names the file") {
  CHECK(error("nproc_per_node: 0\n") ==
        "cfg.yaml:1:17: nproc_per_node: expected a positive integer or one of gpu, cpu, auto, got '0'");
  CHECK(error("\nmax_restarts: lots\n") == "cfg.yaml:2:15: max_restarts: expected an integer >= 0, got 'lots'");
  CHECK(error("mixed_precision: fp32\n") == "cfg.yaml:1:18: mixed_precision: expected one of no, fp16, bf16, fp8, got 'fp32'");
  CHECK(error("gpu_ids: [0, 0]\n") == "cfg.yaml:1:10: gpu_ids: GPU 0 is listed twice");
  CHECK(error("nnodes: 2\nnode_rank: 2\n", {"--print_config"}) ==
        "cfg.yaml:2:12: node_rank: expected a node rank in 0..1, got '2'");
  CHECK(error("rdzv_backend: etcd\n") == "cfg.yaml:1:15: rdzv_backend: expected static or c10d, got 'etcd'");
  // The same checks, from a flag, keep the command line's format.
  CHECK(error("", {"--mixed_precision=fp32", "t.py"}) == "--mixed_precision: expected one of no, fp16, bf16, fp8 (got 'fp32')");
}

TEST_CASE("an unknown key in dtlaunch's format is an error that suggests the nearest key") {
  CHECK(error("nproc_per_nod: 2\n") == "cfg.yaml:1:1: nproc_per_nod: unknown key (did you mean nproc_per_node?)");
  CHECK(error("max-restarts: 2\n") == "cfg.yaml:1:1: max-restarts: unknown key (did you mean max_restarts?)");
  CHECK(error("role: a\nenvs:\n  A: 1\n") == "cfg.yaml:2:1: envs: unknown key (did you mean env?)");
  CHECK(error("colour: blue\n") ==
        "cfg.yaml:1:1: colour: unknown key (the keys are dtlaunch's flag names, see dtlaunch --help, and env)");
  CHECK(error("num_processes: 8\n") ==
        "cfg.yaml:1:1: num_processes: unknown key (did you mean nproc_per_node? num_processes is accelerate's key, "
        "read only from files that have distributed_type)");
}

TEST_CASE("accelerate files: what is impossible is an error, in accelerate's words") {
  CHECK(error("compute_environment: LOCAL_MACHINE\nnum_processes: 2\n") ==
        "cfg.yaml: distributed_type: missing; accelerate's files name the kind of job (NO, MULTI_CPU, MULTI_GPU, ...)");
  CHECK(error("distributed_type: XLA\n") ==
        "cfg.yaml:1:19: distributed_type: expected one of NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM "
        "(dtlaunch starts CPU and CUDA jobs), got 'XLA'");
  CHECK(error("distributed_type: MULTI_GPU\nnum_machines: 2\nmain_process_ip: h\nnum_processes: 7\n") ==
        "cfg.yaml:4:16: num_processes: expected a total divisible by num_machines=2 (num_processes counts the "
        "processes of all machines), got 7");
  CHECK(error("distributed_type: MULTI_GPU\nnum_machines: 2\nmachine_rank: 2\nmain_process_ip: h\n") ==
        "cfg.yaml:3:15: machine_rank: expected a rank in 0..1 for num_machines=2, got 2");
  CHECK(error("distributed_type: MULTI_GPU\nnum_machines: 0\n") ==
        "cfg.yaml:2:15: num_machines: expected an integer >= 1, got '0'");
  CHECK(error("distributed_type: MULTI_GPU\nnum_processes: two\n") ==
        "cfg.yaml:2:16: num_processes: expected an integer >= 1, got 'two'");
  CHECK(error("distributed_type: MULTI_GPU\nmain_process_port: 70000\n") ==
        "cfg.yaml:2:20: main_process_port: expected a port in 0..65535, got '70000'");
  CHECK(error("distributed_type: MULTI_GPU\nnum_machines: 3\n") ==
        "cfg.yaml:2:15: num_machines: 3 machines need main_process_ip, the address of machine 0");
  CHECK(error("distributed_type: MULTI_GPU\nsame_network: sometimes\n") ==
        "cfg.yaml:2:15: same_network: expected true or false, got 'sometimes'");
  CHECK(error("distributed_type: MULTI_GPU\nuse_cpu: 2\n") == "cfg.yaml:2:10: use_cpu: expected true or false, got '2'");
}

TEST_CASE("more workers than the GPUs a file lists is refused before anything starts") {
  CHECK(error("nproc_per_node: 4\ngpu_ids: 0,1\n") ==
        "cfg.yaml:1:17: nproc_per_node: expected at most 2 workers per node, the GPUs listed in gpu_ids "
        "(cfg.yaml:2:10: gpu_ids), got '4'");
  CHECK(error("gpu_ids: 0,1\n", {"--nproc_per_node=3", "t.py"}) ==
        "--nproc_per_node: expected at most 2 workers per node, the GPUs listed in gpu_ids (cfg.yaml:1:10: gpu_ids) "
        "(got '3')");
  CHECK(error("distributed_type: MULTI_GPU\nnum_machines: 2\nmain_process_ip: h\nnum_processes: 8\ngpu_ids: '0,1'\n",
              {"--print_config"}) ==
        "cfg.yaml:4:16: num_processes: expected at most 2 workers per node, the GPUs listed in gpu_ids "
        "(cfg.yaml:5:10: gpu_ids), got '4' (total 8 over 2 machines)");
  CHECK(error("use_cpu: true\nnproc_per_node: gpu\n") ==
        "cfg.yaml:2:17: nproc_per_node: expected a count, cpu or auto, since use_cpu is set (cfg.yaml:1:10: use_cpu), "
        "got 'gpu'");
  CHECK(ok("nproc_per_node: 2\ngpu_ids: 0,1\n").gpu_ids == std::vector<int>{0, 1});
  CHECK_FALSE(ok("gpu_ids: all\n").gpu_ids);
}

TEST_CASE("the config file comes from the flag, then DTLAUNCH_CONFIG_FILE, then the default path") {
  auto read = files_of({{"/x/dtlaunch/default_config.yaml", "max_restarts: 1\n"},
                        {"/h/.config/dtlaunch/default_config.yaml", "max_restarts: 2\n"},
                        {"mine.yaml", "max_restarts: 3\n"},
                        {"env.yaml", "max_restarts: 4\n"}});
  auto restarts = [&](std::vector<std::string> args, Vars vars) {
    args.push_back("t.py");
    auto r = parse_command_line(args, env_of(vars), read);
    INFO((r ? r->output : r.error().message));
    REQUIRE(r.value().options);
    return r->options->max_restarts;
  };
  CHECK(restarts({}, {{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/h"}}) == 1);
  CHECK(restarts({}, {{"HOME", "/h"}}) == 2);
  CHECK(restarts({}, {{"HOME", "/elsewhere"}}) == 0);
  CHECK(restarts({}, {}) == 0);
  CHECK(restarts({}, {{"HOME", "/h"}, {"DTLAUNCH_CONFIG_FILE", "env.yaml"}}) == 4);
  CHECK(restarts({"--config_file", "mine.yaml"}, {{"HOME", "/h"}, {"DTLAUNCH_CONFIG_FILE", "env.yaml"}}) == 3);
  CHECK(restarts({"--config-file=mine.yaml"}, {}) == 3);
  CHECK(restarts({"--config_file", ""}, {{"HOME", "/h"}}) == 0);
  CHECK(restarts({}, {{"HOME", "/h"}, {"DTLAUNCH_CONFIG_FILE", ""}}) == 0);

  auto r = parse_command_line({"--config_file", "nope.yaml", "t.py"}, env_of({}), read);
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  CHECK(r.error().message == "--config_file: cannot read 'nope.yaml': No such file or directory");
  r = parse_command_line({"t.py"}, env_of({{"DTLAUNCH_CONFIG_FILE", "gone.yaml"}}), read);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "DTLAUNCH_CONFIG_FILE: cannot read 'gone.yaml': No such file or directory");
}

TEST_CASE("print_config says which file is in effect, and needs no program") {
  auto r = parse_command_line({"--print_config"}, env_of({{"HOME", "/h"}}), files_of({}));
  REQUIRE(r);
  CHECK(r->output.rfind("# dtlaunch settings in effect, and where each comes from (flag > variable > detected > config file > "
                       "default)\n# config file: none (/h/.config/dtlaunch/default_config.yaml does not exist)\n",
                       0) == 0);
  CHECK(r->output.find("\nnproc_per_node: 1  ") != std::string::npos);
  r = parse_command_line({"--print_config", "--rdzv_token=s3cret"}, env_of({}), files_of({}));
  REQUIRE(r);
  CHECK(r->output.find("s3cret") == std::string::npos);
  CHECK(r->output.find("rdzv_token: '<hidden>'") != std::string::npos);
}

TEST_CASE("did_you_mean picks the nearest name and stays quiet when nothing is near") {
  std::vector<std::string> keys{"nproc_per_node", "nnodes", "node_rank", "max_restarts", "env"};
  CHECK(did_you_mean("nproc-per-node", keys) == "nproc_per_node");
  CHECK(did_you_mean("NNODES", keys) == "nnodes");
  CHECK(did_you_mean("node_rnak", keys) == "node_rank");
  CHECK(did_you_mean("restarts", keys) == "");
  CHECK(did_you_mean("zzz", keys) == "");
}

TEST_CASE("yaml_scalar quotes only what would read back differently") {
  CHECK(yaml_scalar("bf16") == "bf16");
  CHECK(yaml_scalar("no") == "'no'");
  CHECK(yaml_scalar("") == "''");
  CHECK(yaml_scalar("0,1") == "0,1");
  CHECK(yaml_scalar("/var/log/x") == "/var/log/x");
  CHECK(yaml_scalar("it's: here") == "'it''s: here'");
  CHECK(yaml_scalar("#x") == "'#x'");
  CHECK(yaml_scalar("a b") == "'a b'");
  CHECK(yaml_scalar("a\nb\x1b\"c\\") == "\"a\\nb\\x1b\\\"c\\\\\"");  // control characters: escaped, in double quotes
  for (std::string s : {"no", "yes", "a b", "it's", "-1x", "~", "null", "x: y", "10.0.0.1:29500", "a\nb", "\ttab\\n\x1b[2J'\""}) {
    auto parsed = parse_config("env:\n  V: " + yaml_scalar(s) + "\n", "f");
    REQUIRE(parsed);
    CHECK(parsed->env.at(0).second.value == s);
  }
}

namespace {

/// parse_config's error for `yaml`, or "" when it parsed.
std::string parse_error(const std::string& yaml) {
  auto parsed = parse_config(yaml, "cfg.yaml");
  return parsed ? "" : parsed.error().message;
}

}  // namespace

TEST_CASE("a token that starts no node is a syntax error, not a parse that loops until memory runs out") {
  // yaml-cpp 0.7's issue #1040: each of these made LoadAll add empty documents forever.
  CHECK(error(",") == "cfg.yaml:1:1: YAML syntax error: unexpected ','");
  CHECK(error("--- ,") == "cfg.yaml:1:5: YAML syntax error: unexpected ','");
  CHECK(error("nproc_per_node: 2\n,\n", {"--print_config"}) == "cfg.yaml:2:1: YAML syntax error: end of map not found");
  CHECK(error("\n\n  ,") == "cfg.yaml:3:3: YAML syntax error: unexpected ','");
  for (const char* yaml : {",", "--- ,", ",,", "a: 1\n,", "- ,", "]", "}", "a: 1\n]", "--- ]", "? a\n,"}) {
    INFO(yaml);
    CHECK_FALSE(parse_error(yaml).empty());
  }
}

TEST_CASE("a file larger than 256 KiB is refused, by the parser and by the disk reader") {
  const std::string big = "# " + std::string(kMaxConfigFileBytes, 'x') + "\n";
  CHECK(parse_error(big) == "cfg.yaml: " + std::to_string(big.size()) + " bytes, more than a config file may have (262144)");
  auto read = disk_files()("/dev/zero");
  CHECK(read.status == FileRead::Status::error);
  CHECK(read.text == "larger than 256 KiB, too large for a config file");
}

TEST_CASE("a value longer than 16 KiB is an error that names the key and its line") {
  const std::string long_value(kMaxValueBytes + 1, 'x');
  CHECK(error("role: a\nlog_dir: " + long_value + "\n") ==
        "cfg.yaml:2:10: log_dir: expected a value of at most 16384 bytes, got 16385");
  CHECK(error("env:\n  A: " + long_value + "\n") == "cfg.yaml:2:6: env: A: expected a value of at most 16384 bytes, got 16385");
  CHECK(ok("log_dir: " + std::string(kMaxValueBytes, 'x') + "\n").log_dir == std::string(kMaxValueBytes, 'x'));
}

TEST_CASE("print_config lines up comments only over short lines, so a long value is printed once") {
  const std::string value(10000, 'x');
  auto r = parse_with("log_dir: " + value + "\n", {"--print_config"});
  REQUIRE(r);
  REQUIRE(r->output.find("log_dir: " + value + "  # cfg.yaml:1:10: log_dir\n") != std::string::npos);
  CHECK(r->output.size() < value.size() + 10000);
  // the short lines keep their comments lined up, past the longest of them
  const auto nnodes = r->output.find("\nnnodes: 1 ");
  REQUIRE(nnodes != std::string::npos);
  const auto line = r->output.substr(nnodes + 1, r->output.find('\n', nnodes + 1) - nnodes - 1);
  CHECK(line.find_first_not_of(' ', 10) == r->output.find("# default", r->output.find("\nnode_rank: ")) -
                                                r->output.find("\nnode_rank: ") - 1);
  CHECK(line.ends_with("# default"));
}

TEST_CASE("values echoed in errors are escaped, so that every error is one line") {
  CHECK(error("max_restarts: \"1\\n2\"\n") == "cfg.yaml:1:15: max_restarts: expected an integer >= 0, got '1\\n2'");
  CHECK(error("max_restarts: \"1\\0\"\n") == "cfg.yaml:1:15: max_restarts: expected an integer >= 0, got '1\\x00'");
  CHECK(error("\"a\\nb\\e[2J\": 1\n") ==
        "cfg.yaml:1:1: a\\nb\\x1b[2J: unknown key (the keys are dtlaunch's flag names, see dtlaunch --help, and env)");
  CHECK(error("role: a\n", {"--max_restarts=x\ny", "t.py"}) == "--max_restarts: expected an integer >= 0 (got 'x\\ny')");
  CHECK(error("", {"--rdzv_conf=a\x1b", "t.py"}) == "--rdzv_conf: 'a\\x1b' is not key=value");
  auto r = parse_command_line({"--config_file", "x\ny.yaml", "t.py"}, env_of({}), files_of({}));
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "--config_file: cannot read 'x\\ny.yaml': No such file or directory");
}

TEST_CASE("a map nested in itself through aliases is looked at in bounded time") {
  // Each level names the one before twice: 2^60 paths, which unset() once walked in full.
  // (inside megatron_lm_config, a key accelerate knows and dtlaunch only names)
  std::string yaml = "distributed_type: MULTI_GPU\nmegatron_lm_config:\n  l0: &l0 {a: 0, b: 0}\n";
  for (int i = 1; i <= 60; ++i) {
    yaml += "  l" + std::to_string(i) + ": &l" + std::to_string(i) + " {a: *l" + std::to_string(i - 1) + ", b: *l" +
            std::to_string(i - 1) + "}\n";
  }
  auto parsed = parse_config(yaml, "cfg.yaml");
  REQUIRE(parsed);
  // A map inside itself: unset() recursed until the stack overflowed (found by config_file_fuzz).
  parsed = parse_config("distributed_type: MULTI_GPU\nmegatron_lm_config: &l1 {a: 0, b: *l1}\n", "cfg.yaml");
  REQUIRE(parsed);
  CHECK(parsed->warnings.at(0).rfind("cfg.yaml: ignoring megatron_lm_config (", 0) == 0);
}

TEST_CASE("an accelerate file with keys accelerate does not know is refused, as accelerate launch refuses it") {
  // accelerate's own tests/test_configs/invalid_keys.yaml
  const std::string yaml =
      "compute_environment: LOCAL_MACHINE\ndeepspeed_config: {}\ndistributed_type: 'NO'\ndowncast_bf16: 'no'\n"
      "fsdp_config: {}\nmachine_rank: 0\nmain_process_ip: null\nmain_process_port: null\n"
      "main_training_function: main\nmixed_precision: 'no'\nnum_machines: 1\nnum_processes: 1\nuse_cpu: false\n"
      "invalid_key: \"invalid_value\"\nanother_invalid_key: \"another_invalid_value\"";
  auto parsed = parse_config(yaml, "invalid_keys.yaml");
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().message ==
        "invalid_keys.yaml:14:1: invalid_key: unknown key (also another_invalid_key): accelerate launch refuses a "
        "file with keys its config does not have (dtlaunch's own keys go in a file without distributed_type)");
  // The keys accelerate converts itself (fp16, dynamo_backend) are its own; SageMaker's only on SageMaker.
  auto converted = parse_config("distributed_type: MULTI_GPU\nfp16: true\n", "c.yaml");
  CHECK(converted);
  auto sagemakers = parse_config("distributed_type: MULTI_GPU\nregion: x\n", "c.yaml");
  CHECK_FALSE(sagemakers);
}
