// `dtlaunch rdzv-server`: the rendezvous on its own, for clusters where no training node should
// host it. Agents reach it with --rdzv_endpoint and --rdzv_conf is_host=0. It also serves the
// workers' c10d store on the same port (the agents' default --agent_store sends their workers there).
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/posix.h"
#include "commands/commands.h"
#include "config/command_line.h"
#include "agent/rdzv_options.h"
#include "agent/shared_port.h"
#include "store/server.h"

namespace dtl::commands {
namespace {

constexpr const char* kCommand = "dtlaunch rdzv-server";

/// Prints `e` the one way errors are printed, and gives its exit code.
int report(const Error& e) {
  std::cerr << error_line(e, kCommand);
  return e.exit_code;
}

/// Where to listen, and the job's settings as an agent has them (each with where it came from), so
/// that the agent's function makes the server's options.
struct ServerFlags {
  std::string host;
  int port = 29400;
  config::LaunchOptions settings;
};

/// What the command line asks for: a server with `flags`, or else only `help`, printed with exit code 0.
struct ServerRequest {
  std::optional<ServerFlags> flags;
  std::string help;
};

/// The settings an agent shares with the rendezvous, read as the agents read them: the same
/// spellings, PET_* and other variables, config file and errors.
const std::vector<config::Setting> kShared = {
    config::Setting::nnodes,     config::Setting::rdzv_backend, config::Setting::rdzv_id,
    config::Setting::run_id,     config::Setting::max_restarts, config::Setting::rdzv_conf,
    config::Setting::rdzv_token, config::Setting::rdzv_token_file};

/// The request, or bad arguments; the settings' warnings are said on stderr here.
Result<ServerRequest> parse_flags(const std::vector<std::string>& args, const EnvLookup& env,
                                  const config::ReadFile& files) {
  std::vector<config::CommandOption> own = {{"--host", "address to listen on (default: every interface)", {}},
                                            {"--port", "port to listen on (default 29400)", {}}};
  auto parsed = config::parse_command_settings(kCommand,
                                               "run the rendezvous for a multi-node job on its own", kShared,
                                               {{config::Setting::rdzv_backend, "c10d"}}, own, args, env, files);
  if (!parsed) return tl::unexpected(parsed.error());
  for (const auto& w : parsed->warnings) std::cerr << kCommand << ": warning: " << w << "\n";
  if (!parsed->options) return ServerRequest{std::nullopt, parsed->output};
  ServerFlags f{own[0].value.value_or(""), 29400, std::move(*parsed->options)};
  if (const auto& port = own[1].value) {
    const bool digits = !port->empty() && port->size() <= 5 && port->find_first_not_of("0123456789") == std::string::npos;
    f.port = digits ? std::stoi(*port) : 0;
    if (f.port < 1 || f.port > 65535) return fail("--port: expected a port in 1..65535 (got '" + *port + "')");
  }
  return ServerRequest{std::move(f), ""};
}

/// Serves until the job is over, or a signal ends it; returns the job's exit code.
int serve(rendezvous::ServerOptions opts) {
  posix::raise_fd_limit();  // one descriptor per node
  boost::asio::io_context io;
  // The agents' workers find their c10d store at the rendezvous endpoint (--agent_store, the default).
  store::Server store(io);
  agent::share_port_with_store(opts, store);
  try {
    rendezvous::Server server(io, opts);
    spdlog::info("rendezvous for job '{}' listening on {}:{}", opts.credentials.run_id,
                 opts.host.empty() ? "*" : opts.host, server.port());
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    int code = 0;
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      spdlog::warn("received {}, ending the job", sig == SIGINT ? "SIGINT" : "SIGTERM");
      code = 128 + sig;
      server.end_job("the rendezvous server was stopped");
      server.when_empty([&] { io.stop(); });
    });
    // When the job is over and every node has its Exit, the server's work is done.
    server.when_finished([&] {
      server.when_empty([&] {
        signals.cancel();
        io.stop();
      });
    });
    io.run();
    return code ? code : server.exit_code();
  } catch (const std::exception& e) {
    return report(Error{e.what()});
  }
}

}  // namespace

int run_rdzv_server(const std::vector<std::string>& args, const EnvLookup& env) {
  auto request = parse_flags(args, env, config::disk_files());
  if (!request) return report(request.error());
  if (!request->flags) {
    std::cout << request->help;
    return 0;
  }
  const ServerFlags& flags = *request->flags;
  auto made = agent::rdzv_options(flags.settings, flags.host, flags.port);
  if (!made) return report(made.error());
  for (const auto& w : made->warnings) spdlog::warn("{}", w);
  return serve(made->server);
}

}  // namespace dtl::commands
