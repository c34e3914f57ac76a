#include <catch2/catch.hpp>

#include <map>

#include "config/command_line.h"
#include "agent/rdzv_options.h"
#include "launcher/rdzv_endpoint.h"

using namespace dtl;
using namespace std::chrono_literals;

namespace {

using Vars = std::map<std::string, std::string>;

config::LaunchOptions parsed(std::vector<std::string> args, Vars vars = {}, const std::string& yaml = "") {
  auto env = [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional(it->second);
  };
  auto files = [yaml](const std::string& path) -> config::FileRead {
    if (path != "cfg.yaml" || yaml.empty()) return {config::FileRead::Status::missing, "No such file or directory"};
    return {config::FileRead::Status::ok, yaml};
  };
  if (!yaml.empty()) args.insert(args.begin(), {"--config_file", "cfg.yaml"});
  args.push_back("train.py");
  auto r = config::parse_command_line(args, env, files);
  INFO((r ? r->output : r.error().message));
  REQUIRE(r.value().options);
  return *r->options;
}

/// A machine that answers without looking: every address is local, every port free.
agent::AgentHost fake_host() {
  return {"node-a", [](const std::string&) { return true; },
          [](const std::string&, int, const rendezvous::PortNames&) { return Result<int>(31000); }, 42};
}

agent::AgentSetup agent_setup(const config::LaunchOptions& o, const agent::AgentHost& host = fake_host()) {
  launcher::LaunchPlan plan;
  plan.nproc = 2;
  auto made = agent::make_agent_options(o, plan, host);
  if (!made) FAIL("unexpected error: " << made.error().message);
  return *made;
}

std::string agent_error(const config::LaunchOptions& o, const agent::AgentHost& host = fake_host()) {
  launcher::LaunchPlan plan;
  auto made = agent::make_agent_options(o, plan, host);
  REQUIRE_FALSE(made);
  return made.error().message;
}

}  // namespace

TEST_CASE("the token flag wins over PET_RDZV_TOKEN, which wins over DTLAUNCH_RDZV_TOKEN, then the config file") {
  const std::string yaml = "rdzv_token: from-file\n";
  const Vars both{{"PET_RDZV_TOKEN", "from-pet"}, {"DTLAUNCH_RDZV_TOKEN", "from-dtlaunch"}};
  auto token = [](const config::LaunchOptions& o) { return agent::resolve_token(o).value(); };
  CHECK(token(parsed({"--rdzv_token=from-flag"}, both, yaml)).value == "from-flag");
  CHECK(token(parsed({}, both, yaml)).value == "from-pet");
  CHECK(token(parsed({}, {{"DTLAUNCH_RDZV_TOKEN", "from-dtlaunch"}}, yaml)).source == "DTLAUNCH_RDZV_TOKEN");
  CHECK(token(parsed({}, {}, yaml)).value == "from-file");
}

TEST_CASE("only a token typed on the command line is warned about, whatever else gave one") {
  const auto on_flag = agent_setup(parsed({"--nnodes=2", "--rdzv_token=s"}));
  REQUIRE(on_flag.warnings.size() == 1);
  CHECK(on_flag.warnings[0] == "--rdzv_token on the command line is visible to every user of this machine (ps); "
                               "prefer --rdzv_token_file or DTLAUNCH_RDZV_TOKEN");
  CHECK(agent_setup(parsed({"--nnodes=2"}, {{"PET_RDZV_TOKEN", "s"}})).warnings.empty());
  CHECK(agent_setup(parsed({"--nnodes=2"}, {{"DTLAUNCH_RDZV_TOKEN", "s"}})).warnings.empty());
  const auto from_file = agent_setup(parsed({"--nnodes=2"}, {}, "rdzv_token: s\n"));
  CHECK(from_file.warnings.empty());
  CHECK(from_file.options.client.credentials.token == "s");
}

TEST_CASE("an empty token names where it came from") {
  auto error = [](const config::LaunchOptions& o) { return agent::resolve_token(o).error().message; };
  CHECK(error(parsed({"--rdzv_token="})) == "--rdzv_token is empty");
  CHECK(error(parsed({}, {{"PET_RDZV_TOKEN", ""}})) == "PET_RDZV_TOKEN is set but empty");
}

TEST_CASE("a token file set to '' anywhere is an error naming where, not an unauthenticated job") {
  auto error = [](const config::LaunchOptions& o) {
    auto token = agent::resolve_token(o);
    if (token) FAIL("no error, token '" << token->value << "'");
    return token.error().message;
  };
  CHECK(error(parsed({"--rdzv_token_file="})) == "--rdzv_token_file is empty");
  CHECK(error(parsed({"--rdzv-token-file="})) == "--rdzv_token_file is empty");
  CHECK(error(parsed({}, {{"PET_RDZV_TOKEN_FILE", ""}})) == "PET_RDZV_TOKEN_FILE is set but empty");
  CHECK(error(parsed({}, {}, "rdzv_token_file: ''\n")) == "cfg.yaml:1:18: rdzv_token_file is set but empty");
}

TEST_CASE("the handshake names the token by where it came from") {
  auto name = [](const config::LaunchOptions& o) { return agent_setup(o).options.client.credentials.token_name; };
  CHECK(name(parsed({"--nnodes=2", "--rdzv_token=s"})) == "--rdzv_token");
  CHECK(name(parsed({"--nnodes=2"}, {{"DTLAUNCH_RDZV_TOKEN", "s"}})) == "DTLAUNCH_RDZV_TOKEN");
  CHECK(name(parsed({"--nnodes=2"}, {{"PET_RDZV_TOKEN", "s"}})) == "PET_RDZV_TOKEN");
  CHECK(name(parsed({"--nnodes=2"})) == "--rdzv_token");  // none: "no --rdzv_token: any host can join"
}

TEST_CASE("the agent's client and server and the rdzv-server get the same timings from --rdzv_conf") {
  auto o = parsed({"--nnodes=2", "--rdzv_conf=timeout=7,last_call_timeout=0.25,keep_alive_interval=0.2,"
                   "keep_alive_max_attempt=4"});
  auto a = agent_setup(o).options;
  REQUIRE(a.server);
  auto standalone = agent::rdzv_options(o, "", 29400).value().server;
  for (const auto* s : {&*a.server, &standalone}) {
    CHECK(s->round.join_timeout == 7s);
    CHECK(s->round.last_call_timeout == 250ms);
    CHECK(s->liveness.interval == 200ms);
    CHECK(s->liveness.misses == 4);
    CHECK(s->liveness.silence_limit() == 800ms);
    CHECK(s->round.names.node_rank == "--node_rank");
  }
  CHECK(a.client.connect_timeout == 7s);
  CHECK(a.client.liveness.silence_limit() == 800ms);
  CHECK(a.client.credentials.token_name == "--rdzv_token");
}

TEST_CASE("a static agent joins its master_addr:master_port with this machine's facts") {
  auto a = agent_setup(parsed({"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=29511",
                         "--local_addr=10.0.0.2", "--run_id=job42"}))
               .options;
  CHECK(a.client.host == "10.0.0.1");
  CHECK(a.client.port == 29511);
  CHECK(a.client.credentials.run_id == "job42");
  CHECK(a.client.join.host == "node-a");
  CHECK(a.client.join.addr == "10.0.0.2");
  CHECK(a.client.join.nproc == 2);
  CHECK(a.client.join.node_rank == 1);
  CHECK(a.client.join.worker_port == 31000);
  CHECK(a.client.join.agent_id == 42);
  CHECK_FALSE(a.server);  // node 0 hosts
}

TEST_CASE("a --local_addr that does not resolve is named --local_addr, not --master_addr") {
  auto host = fake_host();
  host.reserve_port = rendezvous::reserve_check;
  CHECK_THAT(agent_error(parsed({"--nnodes=2", "--local_addr=no-such-host.invalid"}), host),
             Catch::StartsWith("cannot find a free port for the workers: cannot resolve --local_addr "
                               "'no-such-host.invalid': "));
  CHECK_THAT(agent_error(parsed({"--nnodes=2"}, {{"PET_LOCAL_ADDR", "no-such-host.invalid"}}), host),
             Catch::StartsWith("cannot find a free port for the workers: cannot resolve PET_LOCAL_ADDR "));
}

TEST_CASE("a port's names are its flags when typed, else the setting and where it came from") {
  auto names = [](const config::LaunchOptions& o) { return agent::port_names(o, config::Setting::master_addr, config::Setting::master_port); };
  CHECK(names(parsed({"--master-port=29655"})).given(29655) == "--master-port 29655");
  CHECK(names(parsed({"--master-port=29655"})).free() == "--master-port=0");
  CHECK(names(parsed({})).given(29500) == "--master_port 29500");
  const auto from_file = names(parsed({}, {}, "master_port: 29655\n"));
  CHECK(from_file.given(29655) == "master_port=29655 (from cfg.yaml:1:14: master_port)");
  CHECK(from_file.free() == "0");
  CHECK(names(parsed({}, {{"PET_MASTER_PORT", "29655"}})).given(29655) == "master_port=29655 (from PET_MASTER_PORT)");
  CHECK(agent_setup(parsed({"--nnodes=2"}, {{"PET_MASTER_PORT", "29655"}})).options.names.given(29655) ==
        "master_port=29655 (from PET_MASTER_PORT)");
}

TEST_CASE("a c10d backend without an endpoint names where the backend came from") {
  CHECK(agent_error(parsed({"--nnodes=2"}, {{"PET_RDZV_BACKEND", "c10d"}})) ==
        "rdzv_backend=c10d (from PET_RDZV_BACKEND) needs --rdzv_endpoint host[:port]");
}

TEST_CASE("bad endpoints name the setting that gave them") {
  CHECK(agent_error(parsed({"--nnodes=2", "--rdzv_backend=c10d"})) ==
        "--rdzv_backend=c10d needs --rdzv_endpoint host[:port]");
  CHECK(agent_error(parsed({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=host:99999"})) ==
        "--rdzv_endpoint: port '99999' is not in 1..65535");
  CHECK(agent_error(parsed({"--nnodes=2", "--master_port=0"})) ==
        "--master_addr and --master_port: port '0' is not in 1..65535");
}

TEST_CASE("an IPv6 --master_addr needs no brackets, as torchrun takes it; host:port there is refused") {
  CHECK(launcher::rdzv_endpoint(parsed({"--nnodes=2", "--master_addr=fd00::2", "--master_port=29511"})).value() ==
        std::pair<std::string, int>{"fd00::2", 29511});
  CHECK(launcher::rdzv_endpoint(parsed({"--nnodes=2", "--master_addr=[::1]"})).value() ==
        std::pair<std::string, int>{"::1", 29500});
  CHECK(agent_error(parsed({"--nnodes=2", "--master_addr=10.0.0.1:1234"})) ==
        "--master_addr: '10.0.0.1:1234' is not a host name or address (the port is --master_port's)");
}
