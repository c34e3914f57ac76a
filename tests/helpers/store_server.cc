// dtlaunch's c10d store on its own, for the end-to-end tests and the benchmark: serves on
// HOST:PORT (0: a free port) as many clients as its descriptors allow, prints "port N" once
// listening, and stops on SIGTERM or SIGINT.
#include <sys/resource.h>

#include <csignal>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "store/server.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: store_server HOST PORT\n";
    return 2;
  }
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  // Alone in its process, the store may take all descriptors but a few: the agent's keeps half of
  // them for the rendezvous and the workers' pipes (store::ServerOptions::max_connections).
  dtl::store::ServerOptions options;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY && files.rlim_cur > 128) {
    options.max_connections = files.rlim_cur - 64;
  }
  boost::asio::io_context io;
  dtl::store::Server server(io, options);
  try {
    server.serve(dtl::store::listen_on(io, argv[1], std::stoi(argv[2])));
  } catch (const std::exception& e) {
    std::cerr << "store_server: " << e.what() << "\n";
    return 1;
  }
  std::cout << "port " << server.port() << std::endl;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    server.close();
    io.stop();
  });
  io.run();
  return 0;
}
