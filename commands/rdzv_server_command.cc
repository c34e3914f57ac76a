// `dtlaunch rdzv-server`: the rendezvous on its own, for clusters where no training node should
// host it. Agents reach it with --rdzv_endpoint and --rdzv_conf is_host=0.
#include <sys/resource.h>

#include <iostream>
#include <tuple>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "commands/commands.h"
#include "config/flags.h"
#include "launcher/rdzv_options.h"

namespace dtl::commands {
namespace {

constexpr const char* kError = "dtlaunch rdzv-server: error: ";

/// What the command line asks for: where to listen, and the job's settings as an agent has them
/// (each with where it came from), so that the agent's function makes the server's options.
struct ServerFlags {
  std::string host;
  int port = 29400;
  config::LaunchOptions settings;
};

/// The flags, or the exit code when there is nothing to serve (help, or bad arguments: said on stderr).
std::variant<ServerFlags, int> parse_flags(const std::vector<std::string>& args, const config::EnvLookup& env) {
  CLI::App app{"dtlaunch rdzv-server: run the rendezvous for a multi-node job on its own", "dtlaunch rdzv-server"};
  ServerFlags f;
  config::LaunchOptions& o = f.settings;
  std::string nnodes = "1", conf, token, token_file;
  o.rdzv_backend = "c10d";
  app.add_option("--host", f.host, "address to listen on (default: every interface)");
  app.add_option("--port", f.port, "port to listen on (default 29400)")->check(CLI::Range(1, 65535));
  app.add_option("--nnodes", nnodes, "N or MIN:MAX, as the agents give it");
  app.add_option("--rdzv_backend,--rdzv-backend", o.rdzv_backend, "static or c10d (default)")
      ->check(CLI::IsMember({"static", "c10d"}));
  app.add_option("--rdzv_id,--rdzv-id,--run_id,--run-id", o.run_id, "job id the agents must give");
  app.add_option("--max_restarts,--max-restarts", o.max_restarts, "as the agents give it")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--rdzv_conf,--rdzv-conf", conf, "join_timeout, last_call_timeout, keep_alive_interval, ...");
  auto* token_flag = app.add_option("--rdzv_token,--rdzv-token", token, "shared secret (or DTLAUNCH_RDZV_TOKEN)");
  auto* file_flag = app.add_option("--rdzv_token_file,--rdzv-token-file", token_file, "file holding the shared secret");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << kError << e.what() << "\n";
    return 2;
  }

  if (token_flag->count()) {
    o.rdzv_token = token;
    o.sources["rdzv_token"] = {config::Source::Kind::flag, "--rdzv_token", ""};
  } else if (auto v = env("DTLAUNCH_RDZV_TOKEN")) {
    o.rdzv_token = *v;
    o.sources["rdzv_token"] = {config::Source::Kind::env, "DTLAUNCH_RDZV_TOKEN", ""};
  }
  if (file_flag->count()) {
    o.rdzv_token_file = token_file;
    o.sources["rdzv_token_file"] = {config::Source::Kind::flag, "--rdzv_token_file", ""};
  }
  std::string flag = "--nnodes", value = nnodes;  // named in the error line, as the agents' flags are
  try {
    std::tie(o.min_nodes, o.max_nodes) = config::parse_nnodes(nnodes);
    flag = "--rdzv_conf", value = conf;
    o.rdzv_conf = config::parse_rdzv_conf(conf);
  } catch (const std::invalid_argument& e) {
    const bool got = std::string(e.what()).rfind("expected", 0) == 0;
    std::cerr << kError << flag << ": " << e.what() << (got ? " (got '" + value + "')" : "") << "\n";
    return 2;
  }
  return f;
}

/// Serves until the job is over, or a signal ends it; returns the job's exit code.
int serve(const rendezvous::ServerOptions& opts) {
  // One descriptor per node: thousands of nodes need more than the usual soft limit of 1024.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  boost::asio::io_context io;
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
    std::cerr << kError << e.what() << "\n";
    return 2;
  }
}

}  // namespace

int run_rdzv_server(const std::vector<std::string>& args, const config::EnvLookup& env) {
  auto parsed = parse_flags(args, env);
  if (auto* code = std::get_if<int>(&parsed)) return *code;
  const auto& flags = std::get<ServerFlags>(parsed);
  auto made = launcher::rdzv_options(flags.settings, flags.host, flags.port);
  if (auto* err = std::get_if<Error>(&made)) {
    std::cerr << kError << err->message << "\n";
    return err->exit_code;
  }
  for (const auto& w : std::get<launcher::RdzvOptions>(made).warnings) spdlog::warn("{}", w);
  return serve(std::get<launcher::RdzvOptions>(made).server);
}

}  // namespace dtl::commands
