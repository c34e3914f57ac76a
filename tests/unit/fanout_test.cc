#include <catch2/catch.hpp>
#include <signal.h>

#include <unistd.h>

#include <map>

#include "config/hostfile.h"
#include "fanout/fanout.h"
#include "tests/unit/fake_env.h"

using namespace dtl;

namespace {

std::vector<config::Host> hosts_of(Result<std::vector<config::Host>> r) {
  if (!r) FAIL(r.error().message);
  return std::move(*r);
}

std::string error_of(const Result<std::vector<config::Host>>& r) {
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  return r.error().message;
}

std::string names(const std::vector<config::Host>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    out += (out.empty() ? "" : " ") + h.name + (h.slots ? "=" + std::to_string(*h.slots) : "");
    for (size_t i = 0; i < h.chosen.size(); ++i) out += (i ? "," : ":") + std::to_string(h.chosen[i]);
  }
  return out;
}

config::LaunchOptions options(std::vector<std::string> args, std::map<std::string, std::string> vars = {}) {
  args.push_back("train.py");
  auto r = config::parse_command_line(args, test::env_of(vars), test::files_of({}));
  INFO((r ? r->output : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

fanout::FanoutInputs inputs(std::string hostfile = "a slots=2\nb slots=2\n") {
  fanout::FanoutInputs in;
  in.args = {"--hostfile", "hf", "train.py"};
  in.environment = {"NCCL_DEBUG=INFO", "PATH=/bin", "DTLAUNCH_RDZV_TOKEN=old", "PET_MAX_RESTARTS=1", "HOME=/root"};
  in.cwd = "/work/it's here";
  in.hostfile_text = std::move(hostfile);
  in.token = "fresh";
  in.find_program = [](const std::string& name) { return std::optional<std::string>("/usr/bin/" + name); };
  return in;
}

fanout::FanoutPlan plan(const config::LaunchOptions& o, const fanout::FanoutInputs& in) {
  auto r = fanout::plan_fanout(o, in);
  if (!r) FAIL(r.error().message);
  return std::move(*r);
}

std::string plan_error(const config::LaunchOptions& o, const fanout::FanoutInputs& in) {
  auto r = fanout::plan_fanout(o, in);
  REQUIRE_FALSE(r);
  CHECK(r.error().exit_code == 2);
  return r.error().message;
}

std::map<std::string, std::string> vars_of(const fanout::NodeStart& n) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : n.variables) m[k] = v;  // later entries win, as setenv in order
  return m;
}

}  // namespace

TEST_CASE("hostfile: DeepSpeed's format, bare hosts, comments") {
  auto h = hosts_of(config::parse_hostfile("# cluster\n\nworker-0 slots=4  # big\n\tworker-1   slots=2\r\nw2\n", "hf"));
  CHECK(names(h) == "worker-0=4 worker-1=2 w2");
}

TEST_CASE("hostfile: every bad line is named with file:line") {
  CHECK(error_of(config::parse_hostfile("a slots=2\na slots=4\n", "hf")) == "hf:2: host a is listed twice");
  CHECK(error_of(config::parse_hostfile("a slots=x\n", "hf")) == "hf:1: expected slots=N with N in 1..4096, got slots=x");
  CHECK(error_of(config::parse_hostfile("a slots=0\n", "hf")) == "hf:1: expected slots=N with N in 1..4096, got slots=0");
  CHECK(error_of(config::parse_hostfile("a gpus=2\n", "hf")) == "hf:1: expected 'host slots=N' or 'host', got a gpus=2");
  CHECK(error_of(config::parse_hostfile("\na slots=1 b\n", "hf")) ==
        "hf:2: expected 'host slots=N' or 'host', got a slots=1 b");
  CHECK(error_of(config::parse_hostfile("-oProxyCommand=x slots=1\n", "hf")) ==
        "hf:1: expected a host name, got -oProxyCommand=x");
  CHECK(error_of(config::parse_hostfile("a$(id) slots=1\n", "hf")) == "hf:1: expected a host name, got a$(id)");
  CHECK(error_of(config::parse_hostfile("# nothing\n", "hf")) == "hf: no hosts (expected lines of 'host slots=N')");
}

TEST_CASE("host lists: counts after the last colon, IPv6 in brackets") {
  CHECK(names(hosts_of(config::parse_host_list("h1:4,h2:4,h3", "--hosts"))) == "h1=4 h2=4 h3");
  CHECK(names(hosts_of(config::parse_host_list("[fd00::1]:2,10.0.0.2", "--hosts"))) == "fd00::1=2 10.0.0.2");
  CHECK(error_of(config::parse_host_list("h1:4,h1", "--hosts")) == "--hosts: host h1 is listed twice");
  CHECK(error_of(config::parse_host_list("h1:,h2", "--hosts")) == "--hosts: expected a slot count in 1..4096 after h1:");
  CHECK(error_of(config::parse_host_list("h1,,h2", "--hosts")) == "--hosts: expected host[:slots],..., got ");
  // a bare IPv6 address is all address: ::1 is not host :: with 1 slot
  CHECK(names(hosts_of(config::parse_host_list("::1", "--hosts"))) == "::1");
  CHECK(names(hosts_of(config::parse_host_list("fd00::1:2,[fd00::2]:3", "--hosts"))) == "fd00::1:2 fd00::2=3");
  CHECK(error_of(config::parse_host_list("[::1", "--hosts")) == "--hosts: expected ] after the IPv6 address in [::1");
  CHECK(error_of(config::parse_host_list("[::1]x", "--hosts")) == "--hosts: expected host[:slots],..., got [::1]x");
}

TEST_CASE("include and exclude filters: DeepSpeed's syntax and checks") {
  const auto pool = hosts_of(config::parse_hostfile("w0 slots=4\nw1 slots=4\nw2 slots=2\nbare\n", "hf"));
  const auto filter = [&](const std::string& inc, const std::string& exc) {
    return config::filter_hosts(pool, inc, "--include", exc, "--exclude");
  };
  CHECK(names(hosts_of(filter("", ""))) == "w0=4 w1=4 w2=2 bare");
  CHECK(names(hosts_of(filter("w1:0,2@w0", ""))) == "w0=4 w1=4:0,2");  // the hostfile's order
  CHECK(names(hosts_of(filter("w2:1,0", ""))) == "w2=2");              // every slot: no list
  CHECK(names(hosts_of(filter("", "w1@w0:3"))) == "w0=4:0,1,2 w2=2 bare");
  CHECK(names(hosts_of(filter("", "w2:0,1"))) == "w0=4 w1=4 bare");  // no slot left: host dropped
  CHECK(error_of(filter("w0", "w1")) == "--include and --exclude cannot be combined (as in deepspeed)");
  CHECK(error_of(filter("w9", "")) == "--include: host w9 is not in the host list");
  CHECK(error_of(filter("w2:2", "")) == "--include: host w2 has no slot 2 (it has 2)");
  CHECK(error_of(filter("w2:x", "")) == "--include: expected slot numbers after w2:");
  CHECK(error_of(filter("bare:0", "")) == "--include: host bare has no slots=N in the host list, so its slots cannot be named");
  CHECK(error_of(filter("", "w0@w1@w2@bare")) == "--exclude: no host is left");
}

TEST_CASE("fan-out plan: one ssh per host, settings and the token only in the variables") {
  auto o = options({"--hostfile", "hf", "--ssh_command", "ssh -F '/my cfg'", "--ssh_port", "2222"});
  auto p = plan(o, inputs());
  REQUIRE(p.nodes.size() == 2);
  const auto& n1 = p.nodes[1];
  CHECK(n1.host == "b");
  CHECK(p.ssh_path == "/usr/bin/ssh");
  CHECK(n1.argv == std::vector<std::string>{"ssh", "-F", "/my cfg", "-o", "BatchMode=yes", "-o",
                                            "ConnectTimeout=10", "-p", "2222", "b",
                                            "cd '/work/it'\\''s here' && exec 'dtlaunch' fanout-node '--hostfile' 'hf' 'train.py'"});
  auto v = vars_of(n1);
  CHECK(v["PET_NNODES"] == "2");
  CHECK(v["PET_NODE_RANK"] == "1");
  CHECK(v["PET_MASTER_ADDR"] == "a");
  CHECK(v["PET_MASTER_PORT"] == "29500");
  CHECK(v["PET_NPROC_PER_NODE"] == "2");
  CHECK(v["PET_NODE_NAME"] == "b");
  CHECK(v["DTLAUNCH_RDZV_TOKEN"] == "fresh");  // the fresh one, never this machine's
  CHECK(v["NCCL_DEBUG"] == "INFO");
  CHECK(v["PET_MAX_RESTARTS"] == "1");
  CHECK(v.count("PATH") == 0);
  CHECK(v.count("HOME") == 0);
}

TEST_CASE("fan-out plan: after `deepspeed`, the working directory leads every host's PYTHONPATH, as deepspeed's runner") {
  auto in = inputs();
  CHECK(vars_of(plan(options({"--hostfile", "hf"}), in).nodes[1]).count("PYTHONPATH") == 0);
  CHECK(vars_of(plan(options({"deepspeed", "--hostfile", "hf"}), in).nodes[1])["PYTHONPATH"] == "/work/it's here");
  in.environment.push_back("PYTHONPATH=/lib/a:/lib/b");
  CHECK(vars_of(plan(options({"deepspeed", "--hostfile", "hf"}), in).nodes[1])["PYTHONPATH"] == "/work/it's here:/lib/a:/lib/b");
  CHECK(vars_of(plan(options({"--hostfile", "hf"}), in).nodes[1])["PYTHONPATH"] == "/lib/a:/lib/b");
  // accelerate's DeepSpeed over pdsh: accelerate's PYTHONPATH, appended to ./.deepspeed_env, wins over
  // the runner's; each host's agent adds the working directory last, as accelerate does
  const auto accelerate = options({"launch", "--use_deepspeed", "--num_machines=2", "--deepspeed_hostfile=hf", "t.py"});
  REQUIRE(accelerate.fanout.deepspeed_runner);
  CHECK(vars_of(plan(accelerate, in).nodes[1])["PYTHONPATH"] == "/lib/a:/lib/b");
}

TEST_CASE("fan-out plan: this machine's CUDA_VISIBLE_DEVICES stays here, other CUDA_ variables go, --export sends it") {
  auto in = inputs();
  in.environment.push_back("CUDA_VISIBLE_DEVICES=3");
  in.environment.push_back("CUDA_DEVICE_MAX_CONNECTIONS=1");
  auto v = vars_of(plan(options({"--hostfile", "hf"}), in).nodes[1]);
  CHECK(v.count("CUDA_VISIBLE_DEVICES") == 0);  // it would narrow every host to this one's GPU 3
  CHECK(v["CUDA_DEVICE_MAX_CONNECTIONS"] == "1");
  CHECK(vars_of(plan(options({"--hostfile", "hf", "--export", "CUDA_VISIBLE_DEVICES"}), in).nodes[1])["CUDA_VISIBLE_DEVICES"] == "3");
}

TEST_CASE("fan-out plan: a first host written user@host is met at host") {
  auto p = plan(options({"--hostfile", "hf"}), inputs("root@a slots=2\nb slots=2\n"));
  CHECK(p.nodes[0].argv[p.nodes[0].argv.size() - 2] == "root@a");  // ssh logs in as written
  CHECK(vars_of(p.nodes[1])["PET_MASTER_ADDR"] == "a");
}

TEST_CASE("fan-out plan: --export, .dtlaunch_env, --nnodes, --nproc_per_node, --master_addr") {
  auto in = inputs("a slots=4\nb slots=4\nc slots=4\n");
  in.env_files = {{"/work/it's here/.dtlaunch_env", "# comment\nFROM_FILE=1\n"}};
  auto o = options({"--hostfile", "hf", "--export", "HOME,X=y=z", "--nnodes", "2", "--nproc_per_node", "2",
                    "--master_addr", "10.0.0.9"});
  auto p = plan(o, in);
  REQUIRE(p.nodes.size() == 2);  // deepspeed's --num_nodes: the first hosts
  auto v = vars_of(p.nodes[0]);
  CHECK(v["HOME"] == "/root");
  CHECK(v["X"] == "y=z");
  CHECK(v["FROM_FILE"] == "1");
  CHECK(v["PET_MASTER_ADDR"] == "10.0.0.9");
  CHECK(v.count("PET_NPROC_PER_NODE") == 0);  // the typed --nproc_per_node=2 reaches the host as typed

  in.env_files = {{"/work/it's here/.dtlaunch_env", "oops\n"}};
  CHECK(plan_error(options({"--hostfile", "hf"}), in) == "/work/it's here/.dtlaunch_env:1: expected NAME=VALUE, got oops");
}

TEST_CASE("fan-out plan: accelerate's num_processes / num_machines is each host's count, as its --num_gpus") {
  const std::string config =
      "distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 2\nmain_process_ip: a\n"
      "deepspeed_config:\n  deepspeed_hostfile: hf\n";
  const auto accelerate = [&](std::string more) {
    auto r = config::parse_command_line({"launch", "--config_file", "acc.yaml", "train.py"}, test::env_of({}),
                                        test::files_of({{"acc.yaml", config + more}}));
    INFO((r ? r->output : r.error().message));
    REQUIRE(r.value().options);
    return *r->options;
  };
  auto in = inputs("a slots=3\nb slots=3\n");
  CHECK(vars_of(plan(accelerate(""), in).nodes[1])["PET_NPROC_PER_NODE"] == "1");  // not the 3 slots
  // With a filter accelerate passes no --num_gpus: the slots it names decide.
  auto p = plan(accelerate("  deepspeed_inclusion_filter: a:0,1@b\n"), in);
  CHECK(vars_of(p.nodes[0])["PET_NPROC_PER_NODE"] == "2");
  CHECK(vars_of(p.nodes[1])["PET_NPROC_PER_NODE"] == "3");
}

TEST_CASE("fan-out plan: what the fan-out decides itself is refused when given") {
  const auto in = inputs();
  CHECK(plan_error(options({"--hostfile", "hf", "--node_rank", "1", "--nnodes", "2"}), in) ==
        "--node_rank cannot be combined with --hostfile: each host's rank is its place in the host list");
  CHECK(plan_error(options({"--hostfile", "hf", "--rdzv_token", "s"}), in) ==
        "--rdzv_token cannot be combined with --hostfile: every job gets a fresh token, sent to the hosts over ssh");
  CHECK(plan_error(options({"--hostfile", "hf", "--nnodes", "1:2"}), in) ==
        "--nnodes=1:2: the fan-out starts a fixed number of hosts");
  CHECK(plan_error(options({"--hostfile", "hf", "--nnodes", "3"}), in) == "--nnodes=3 but the host list has 2 hosts");
  CHECK(plan_error(options({"--hostfile", "hf", "--nproc_per_node", "3"}), in) ==
        "--nproc_per_node=3 but host a has slots=2");
  CHECK(plan_error(options({"--hostfile", "hf", "--include", "a", "--nproc_per_node", "1"}), in) ==
        "--nproc_per_node cannot be combined with --include/--exclude (as in deepspeed)");
  CHECK(plan_error(options({"--hostfile", "hf", "--hosts", "a,b"}), in) == "--hostfile and --hosts cannot be combined");
  CHECK(plan_error(options({"--hostfile", "hf", "--export", "NOT_SET_HERE"}), in) ==
        "--export: NOT_SET_HERE is not set here");
  CHECK(plan_error(options({"--hostfile", "hf", "--ssh_command", "ssh 'unclosed"}), in) ==
        "--ssh_command=ssh 'unclosed: cannot split it as a shell would");
  auto nowhere = in;
  nowhere.find_program = [](const std::string&) { return std::optional<std::string>(); };
  CHECK(plan_error(options({"--hostfile", "hf"}), nowhere) == "--ssh_command=ssh: ssh is not on PATH");
}

TEST_CASE("fan-out wire: variables round-trip, a cut stream is refused") {
  const fanout::Variables vars{{"A", "1"}, {"B", "x=y z\nw"}, {"EMPTY", ""}};
  const std::string wire = fanout::encode_variables(vars);
  int p[2];
  REQUIRE(pipe(p) == 0);
  REQUIRE(write(p[1], wire.data(), wire.size()) == static_cast<ssize_t>(wire.size()));
  close(p[1]);
  CHECK(fanout::read_variables(p[0]) == std::optional(vars));
  close(p[0]);
  REQUIRE(pipe(p) == 0);
  REQUIRE(write(p[1], wire.data(), wire.size() - 1) == static_cast<ssize_t>(wire.size() - 1));
  close(p[1]);
  CHECK(fanout::read_variables(p[0]) == std::nullopt);
  close(p[0]);
}

TEST_CASE("fan-out: the node's hello carries its addresses; without --master_addr the hosts meet at the first's") {
  const std::string version = fanout::parse_hello(fanout::node_hello(1, {}))->version;
  CHECK_FALSE(version.empty());
  const auto line = fanout::node_hello(4242, {"10.0.0.5", "fd00::5"});
  CHECK(line == "dtlaunch-node " + version + " pid=4242 10.0.0.5 fd00::5");
  auto h = fanout::parse_hello(line);
  REQUIRE(h);
  CHECK(h->version == version);
  CHECK(h->pid == 4242);
  CHECK(h->addresses == std::vector<std::string>{"10.0.0.5", "fd00::5"});
  CHECK(fanout::parse_hello("dtlaunch-node 0.0.1")->addresses.empty());
  CHECK(fanout::parse_hello("dtlaunch-node 0.0.1 10.0.0.5")->pid == 0);  // an older node's
  CHECK_FALSE(fanout::parse_hello("Welcome to the login node"));

  // deepspeed's runner: the first of `ssh first-host hostname -I`. A name only the launching side's
  // ssh config (or DNS) knows may mean nothing to the other hosts.
  CHECK(fanout::meeting_address("gpu-a", {"10.0.0.5", "10.1.0.5"}) == "10.0.0.5");
  CHECK(fanout::meeting_address("root@gpu-a", {"10.0.0.5"}) == "10.0.0.5");
  CHECK(fanout::meeting_address("gpu-a", {}) == "gpu-a");
  // An address written in the hostfile is the user's choice of network.
  CHECK(fanout::meeting_address("10.9.0.1", {"10.0.0.5"}) == "10.9.0.1");
  CHECK(fanout::meeting_address("root@fd00::9", {"10.0.0.5"}) == "fd00::9");

  CHECK(plan(options({"--hostfile", "hf"}), inputs()).master_from_first_host);
  CHECK_FALSE(plan(options({"--hostfile", "hf", "--master_addr", "a"}), inputs()).master_from_first_host);
}

TEST_CASE("fan-out wire: a hello stays under 1 KiB however many addresses the host has, the first kept") {
  std::vector<std::string> many;
  for (int i = 0; i < 3000; ++i) many.push_back("10.77." + std::to_string(i / 250) + "." + std::to_string(i % 250));
  const auto line = fanout::node_hello(4242, many);
  CHECK(line.size() <= 1024);
  auto h = fanout::parse_hello(line);
  REQUIRE(h);
  REQUIRE(h->addresses.size() > 10);
  CHECK(h->addresses.front() == "10.77.0.0");
  CHECK(fanout::meeting_address("node-a", h->addresses) == "10.77.0.0");
}

TEST_CASE("fan-out wire: the signals passed on to the nodes, as lines that may come in pieces") {
  CHECK(fanout::passed_on(SIGUSR1));
  CHECK(fanout::passed_on(SIGUSR2));
  CHECK_FALSE(fanout::passed_on(SIGTERM));
  CHECK(fanout::encode_signal(SIGUSR1) == "signal USR1\n");
  std::string pending;
  CHECK(fanout::decode_signals(pending, "sig").empty());
  CHECK(fanout::decode_signals(pending, "nal USR2\nsignal USR1\nsignal TERM\nsignal KILL") ==
        std::vector<int>{SIGUSR2, SIGUSR1});
  CHECK(pending == "signal KILL");
  CHECK(fanout::decode_signals(pending, "\n").empty());  // only USR1 and USR2 are ever raised
  CHECK(fanout::decode_signals(pending, std::string(100, 'x')).empty());
  CHECK(pending.empty());  // no line of the wire is that long
}

TEST_CASE("fan-out: in deepspeed's runner's place, ~/.deepspeed_env and ./.deepspeed_env go to every host too") {
  const auto env = [](std::map<std::string, std::string> vars) {
    return [vars](const std::string& k) -> std::optional<std::string> {
      auto it = vars.find(k);
      return it == vars.end() ? std::nullopt : std::optional(it->second);
    };
  };
  const auto home = env({{"HOME", "/root"}});
  CHECK(fanout::env_file_paths(options({"--hostfile", "hf"}), home, "/w") == std::vector<std::string>{"/w/.dtlaunch_env"});
  CHECK(fanout::env_file_paths(options({"deepspeed", "--hostfile", "hf"}), home, "/w") ==
        std::vector<std::string>{"/root/.deepspeed_env", "/w/.deepspeed_env", "/w/.dtlaunch_env"});
  CHECK(fanout::env_file_paths(options({"deepspeed", "--hostfile", "hf"}), env({{"HOME", "/root"}, {"DS_ENV_FILE", "my.env"}}), "/w") ==
        std::vector<std::string>{"/root/my.env", "/w/my.env", "/w/.dtlaunch_env"});
  CHECK(fanout::env_file_paths(options({"deepspeed", "--hostfile", "hf"}), env({{"HOME", "/root"}, {"DS_ENV_FILE", "/etc/ds.env"}}), "/w") ==
        std::vector<std::string>{"/etc/ds.env", "/w/.dtlaunch_env"});
  CHECK(fanout::env_file_paths(options({"deepspeed", "--hostfile", "hf"}), home, "/root") ==
        std::vector<std::string>{"/root/.deepspeed_env", "/root/.dtlaunch_env"});

  // The files in order, a later one winning on the host (its agent sets them in turn); values trimmed
  // as deepspeed's runner strips them.
  auto in = inputs();
  in.env_files = {{"/root/.deepspeed_env", "NCCL_IB_DISABLE=1\nA=home\n"}, {"/w/.deepspeed_env", "A = here \n"}};
  auto vars = plan(options({"deepspeed", "--hostfile", "hf"}), in).nodes[1].variables;
  std::vector<std::string> a;
  for (const auto& [name, value] : vars) {
    if (name == "A") a.push_back(value);
  }
  CHECK(a == std::vector<std::string>{"home", "here"});
}
