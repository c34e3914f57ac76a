// A node of a multi-node job: joins the rendezvous (hosting it when this node is the endpoint),
// runs each round's worker group, reports failures and success, and leaves when the server says.
// The decisions (restart, re-form, give up) are the server's; see rendezvous/round_state.h.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <boost/asio/io_context.hpp>

#include "config/launch_options.h"
#include "launcher/console.h"
#include "launcher/log_layout.h"
#include "node/orphan_guard.h"
#include "launcher/plan.h"
#include "launcher/runner.h"
#include "rendezvous/client.h"
#include "rendezvous/ports.h"
#include "rendezvous/server.h"

namespace dtl::agent {

struct AgentOptions {
  rendezvous::ClientOptions client;
  std::optional<rendezvous::ServerOptions> server;  ///< set: this agent hosts the rendezvous
  /// The endpoint is merely local (not --rdzv_conf is_host=1): if its port is taken, another agent
  /// on this machine hosts it and this one only joins.
  bool host_if_free = false;
  /// What messages call the static rendezvous's address and port (--master_addr, --master_port).
  rendezvous::PortNames names{"--master_addr", "--master_port", ""};
  std::chrono::seconds exit_barrier_timeout{300};   ///< how long a finished node waits for the others
};

/// Runs until the server ends the job, the rendezvous fails, or a signal stops this node; its
/// lifecycle is AgentState's (agent/agent_state.h).
std::unique_ptr<launcher::Runner> make_elastic_agent(boost::asio::io_context& io, launcher::Console& console, const launcher::LaunchPlan& plan,
                                           launcher::RunLogDir& logs, node::OrphanGuard& guard, AgentOptions options);

}  // namespace dtl::agent
