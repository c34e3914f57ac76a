#include "launcher/rdzv_server_command.h"

#include <sys/resource.h>

#include <iostream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "rendezvous/auth.h"
#include "rendezvous/server.h"

namespace dtl::launcher {

int run_rdzv_server_command(const std::vector<std::string>& args, const config::EnvLookup& env) {
  CLI::App app{"dtlaunch rdzv-server: run the rendezvous for a multi-node job on its own", "dtlaunch rdzv-server"};
  std::string host, nnodes = "1", backend = "c10d", run_id = "none", conf, token, token_file;
  int port = 29400, max_restarts = 0;
  app.add_option("--host", host, "address to listen on (default: every interface)");
  app.add_option("--port", port, "port to listen on (default 29400)")->check(CLI::Range(1, 65535));
  app.add_option("--nnodes", nnodes, "N or MIN:MAX, as the agents give it");
  app.add_option("--rdzv_backend,--rdzv-backend", backend, "static or c10d (default)")
      ->check(CLI::IsMember({"static", "c10d"}));
  app.add_option("--rdzv_id,--rdzv-id,--run_id,--run-id", run_id, "job id the agents must give");
  app.add_option("--max_restarts,--max-restarts", max_restarts, "as the agents give it")->check(CLI::Range(0, 1000000));
  app.add_option("--rdzv_conf,--rdzv-conf", conf, "join_timeout, last_call_timeout, keep_alive_interval, ...");
  app.add_option("--rdzv_token,--rdzv-token", token, "shared secret (or DTLAUNCH_RDZV_TOKEN)");
  app.add_option("--rdzv_token_file,--rdzv-token-file", token_file, "file holding the shared secret");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "dtlaunch rdzv-server: error: " << e.what() << "\n";
    return 2;
  }

  rendezvous::ServerOptions opts;
  std::string flag = "--nnodes", value = nnodes;  // named in the error line, as the agents' flags are
  try {
    auto [min, max] = config::parse_nnodes(nnodes);
    flag = "--rdzv_conf", value = conf;
    auto rc = config::parse_rdzv_conf(conf);
    opts.round.min_nodes = min;
    opts.round.max_nodes = max;
    opts.round.join_timeout = std::chrono::milliseconds(static_cast<long long>(rc.join_timeout_s * 1000));
    opts.round.last_call_timeout = std::chrono::milliseconds(static_cast<long long>(rc.last_call_timeout_s * 1000));
    opts.heartbeat_interval = std::chrono::milliseconds(static_cast<long long>(rc.keep_alive_interval_s * 1000));
    opts.heartbeat_misses = rc.keep_alive_max_attempt;
  } catch (const std::invalid_argument& e) {
    const bool got = std::string(e.what()).rfind("expected", 0) == 0;
    std::cerr << "dtlaunch rdzv-server: error: " << flag << ": " << e.what() << (got ? " (got '" + value + "')" : "")
              << "\n";
    return 2;
  }
  auto t = rendezvous::read_token(token.empty() ? std::nullopt : std::optional(token), env("DTLAUNCH_RDZV_TOKEN"),
                                  token_file.empty() ? std::nullopt : std::optional(token_file));
  if (auto* err = std::get_if<rendezvous::TokenError>(&t)) {
    std::cerr << "dtlaunch rdzv-server: error: " << err->what << "\n";
    return 2;
  }
  if (!std::get<rendezvous::Token>(t).warning.empty()) spdlog::warn("{}", std::get<rendezvous::Token>(t).warning);
  opts.token = std::get<rendezvous::Token>(t).value;
  opts.host = host;
  opts.port = port;
  opts.run_id = run_id;
  opts.round.static_backend = backend == "static";
  opts.round.max_restarts = max_restarts;

  // One descriptor per node: thousands of nodes need more than the usual soft limit of 1024.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  boost::asio::io_context io;
  try {
    rendezvous::Server server(io, opts);
    spdlog::info("rendezvous for job '{}' listening on {}:{}", run_id, host.empty() ? "*" : host, server.port());
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
    std::cerr << "dtlaunch rdzv-server: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace dtl::launcher
