// From the settings to the rendezvous, once for the agent and `dtlaunch rdzv-server`: endpoint,
// token, the timings of --rdzv_conf, and the names the rendezvous's messages give the agents' flags
// (rendezvous/ names no flag itself).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "config/launch_options.h"
#include "agent/elastic_agent.h"
#include "launcher/plan.h"
#include "rendezvous/auth.h"
#include "rendezvous/ports.h"
#include "rendezvous/server.h"

namespace dtl::agent {

/// What a message calls setting `name`: the flag as typed, the variable or the config file's
/// key that gave it, or "--name" for a default.
std::string called(const config::LaunchOptions& o, config::Setting name);

/// What reserve_check's messages call settings `addr` and `port`: their flags, or for a port
/// not typed as a flag, the setting and where it came from.
rendezvous::PortNames port_names(const config::LaunchOptions& o, config::Setting addr, config::Setting port);

/// The token: rdzv_token from wherever it came (flag > PET_RDZV_TOKEN > DTLAUNCH_RDZV_TOKEN > config
/// file), else the contents of rdzv_token_file. Only a token typed on the command line is warned about.
Result<rendezvous::Token> resolve_token(const config::LaunchOptions& o);

/// The rendezvous the settings describe, served at `host`:`port` (host empty: every interface):
/// run id and token, the job's shape, the timings of --rdzv_conf. An agent joins it with the same
/// credentials and timings. `warnings`: about the token, one line each.
struct RdzvOptions {
  rendezvous::ServerOptions server;
  std::vector<std::string> warnings;
};
Result<RdzvOptions> rdzv_options(const config::LaunchOptions& o, const std::string& host, int port);

/// What make_agent_options asks of this machine, passed in so that tests answer instead.
struct AgentHost {
  std::string hostname;
  std::function<bool(const std::string& host)> is_local_address;
  std::function<Result<int>(const std::string& addr, int port, const rendezvous::PortNames&)> reserve_port;
  uint64_t agent_id = 0;  ///< random for each agent process
};
AgentHost this_host();

/// An agent's settings, and the warnings they deserve (a token on the command line).
struct AgentSetup {
  AgentOptions options;
  std::vector<std::string> warnings;
};

/// From the options to the agent's settings: endpoint, whether to host, timings, this node's join.
Result<AgentSetup> make_agent_options(const config::LaunchOptions& o, const launcher::LaunchPlan& plan, const AgentHost& host);

}  // namespace dtl::agent
