#include "agent/rdzv_options.h"

#include <chrono>
#include <random>

#include "base/posix.h"
#include "base/printable.h"
#include "launcher/rdzv_endpoint.h"

namespace dtl::agent {
namespace rdzv = dtl::rendezvous;

namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

/// A setting given by the user (not its default), as the rendezvous takes it. A flag is called by
/// its name, however it was spelled: a warning about it is about the setting.
std::optional<rdzv::Given> given(const config::LaunchOptions& o, config::Setting name, const std::string& value) {
  const config::Source s = o.source(name);
  if (s.kind == config::Source::Kind::default_) return std::nullopt;
  const bool flag = s.kind == config::Source::Kind::flag;
  return rdzv::Given{value, flag ? "--" + config::setting_name(name) : s.where, flag};
}

}  // namespace

std::string called(const config::LaunchOptions& o, config::Setting name) { return o.source(name).where; }

rdzv::PortNames port_names(const config::LaunchOptions& o, config::Setting addr, config::Setting port) {
  const config::Source s = o.source(port);
  if (s.kind == config::Source::Kind::flag || s.kind == config::Source::Kind::default_) return {called(o, addr), s.where, ""};
  return {called(o, addr), config::setting_name(port), s.where + (s.note.empty() ? "" : " (" + s.note + ")")};
}

Result<rdzv::Token> resolve_token(const config::LaunchOptions& o) {
  // A token file set anywhere (even to '') is named, so that an empty path is an error, not no token.
  return rdzv::read_token({given(o, config::Setting::rdzv_token, o.rdzv_token), given(o, config::Setting::rdzv_token_file, o.rdzv_token_file),
                           "--rdzv_token_file or DTLAUNCH_RDZV_TOKEN"});
}

Result<RdzvOptions> rdzv_options(const config::LaunchOptions& o, const std::string& host, int port) {
  auto token = resolve_token(o);
  if (!token) return tl::unexpected(token.error());
  const rdzv::Token& t = *token;
  RdzvOptions r;
  if (!t.warning.empty()) r.warnings.push_back(t.warning);
  auto& s = r.server;
  s.host = host;
  s.port = port;
  // The handshake's messages name the token as given ("its DTLAUNCH_RDZV_TOKEN differs"); no token: the flag.
  s.credentials = {o.run_id, t.value, t.source.empty() ? "--rdzv_token" : t.source};
  s.round.static_backend = o.rdzv_backend == "static";
  s.round.min_nodes = o.min_nodes;
  s.round.max_nodes = o.max_nodes;
  s.round.max_restarts = o.max_restarts;
  s.round.agent_store = o.agent_store;
  s.round.join_timeout = ms(o.rdzv_conf.join_timeout(s.round.static_backend));
  s.round.last_call_timeout = ms(o.rdzv_conf.last_call_timeout_s);
  // The refusals describe another node's settings: they name the flags every agent has.
  s.round.names = {"--nnodes", "--node_rank", "--max_restarts", "--rdzv_backend"};
  s.liveness = {ms(o.rdzv_conf.keep_alive_interval_s), o.rdzv_conf.keep_alive_max_attempt};
  return r;
}

AgentHost this_host() {
  std::random_device random;
  return {posix::host_name(), rdzv::is_local_address, rdzv::reserve_check, random() * 4294967296ull + random()};
}

Result<AgentSetup> make_agent_options(const config::LaunchOptions& o, const launcher::LaunchPlan& plan, const AgentHost& host) {
  auto ep = launcher::rdzv_endpoint(o);
  if (!ep) return tl::unexpected(ep.error());
  const auto& [ep_host, ep_port] = *ep;
  auto made = rdzv_options(o, ep_host, ep_port);
  if (!made) return tl::unexpected(made.error());
  auto& [server, warnings] = *made;

  AgentSetup setup;
  setup.warnings = warnings;
  AgentOptions& a = setup.options;
  const bool is_static = server.round.static_backend;
  const auto& conf = o.rdzv_conf;
  bool hosting = is_static ? o.node_rank == 0 : conf.is_host.value_or(false);
  if (!is_static && !conf.is_host) hosting = a.host_if_free = host.is_local_address(ep_host);

  auto& c = a.client;
  c.host = ep_host;
  c.port = ep_port;
  c.credentials = server.credentials;
  c.connect_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(server.round.join_timeout);
  c.liveness = server.liveness;
  c.join.host = o.node_name.empty() ? host.hostname : o.node_name;
  c.join.addr = o.local_addr;
  c.join.nproc = plan.nproc;
  c.join.node_rank = is_static ? o.node_rank : -1;
  c.join.max_restarts = o.max_restarts;
  c.join.min_nodes = o.min_nodes;
  c.join.max_nodes = o.max_nodes;
  c.join.agent_id = host.agent_id;
  const rdzv::PortNames names{called(o, config::Setting::local_addr), "the workers' port", ""};
  auto port = host.reserve_port(o.local_addr.empty() ? "0.0.0.0" : o.local_addr, 0, names);
  if (!port) return fail("cannot find a free port for the workers: " + port.error().message);
  c.join.worker_port = *port;
  a.names = port_names(o, config::Setting::master_addr, config::Setting::master_port);
  if (hosting) a.server = server;
  return setup;
}

}  // namespace dtl::agent
