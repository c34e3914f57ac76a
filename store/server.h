// The c10d store served over TCP in the caller's io_context: one socket per client, no thread per
// client; a client that sends garbage, floods, or stops reading loses its own connection, nobody
// else's. It accepts on a port of its own, or adopts connections another server accepted on a
// shared port (the rendezvous's: rendezvous/server.h hands over what store::classify says is ours).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "store/protocol.h"
#include "store/state.h"

namespace dtl::store {

struct ServerOptions {
  Limits limits;
  StateLimits state;
  size_t max_connections = 1 << 20;
  uint64_t max_unsent = 64ull << 20;          ///< replies one client has not read yet
  uint64_t max_buffered_total = 1ull << 30;   ///< requests in progress, all clients together
};

/// Binds host:port as torch's TCPStore does (SO_REUSEADDR) and listens; port 0 picks a free one.
/// Throws std::runtime_error saying which address and port, and why.
boost::asio::ip::tcp::acceptor listen_on(boost::asio::io_context& io, const std::string& host, int port);

class Server {
 public:
  explicit Server(boost::asio::io_context& io, ServerOptions options = {});
  ~Server();
  /// Accepts clients on `acceptor` (listening already) until close().
  void serve(boost::asio::ip::tcp::acceptor acceptor);
  /// A client accepted elsewhere, with the bytes already read from it.
  void adopt(boost::asio::ip::tcp::socket socket, std::vector<uint8_t> first_bytes);
  /// A new worker group: keys, queues and waits go, and the old group's connections are closed, so
  /// a wait still pending fails in its client instead of being answered by the new group's keys.
  void reset();
  /// Stops accepting and closes every connection.
  void close();

  int port() const;  ///< of serve()'s acceptor; 0 before
  size_t connections() const;
  const StoreState& state() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::store
