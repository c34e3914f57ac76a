// The c10d store served over TCP in the caller's io_context: one socket per client, no thread per
// client; a client that sends garbage, floods, or stops reading loses its own connection, nobody
// else's. It accepts on a port of its own, or adopts connections another server accepted on a
// shared port (the rendezvous's: rendezvous/server.h hands over what store::classify says is ours).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "store/protocol.h"
#include "store/store_state.h"

namespace dtl::store {

struct ServerOptions {
  Limits limits;
  StateLimits state;
  /// Connections at once; 0: half of RLIMIT_NOFILE's soft limit at start, at most 262144 (a 96K-rank
  /// job's workers fit where the hard limit is the usual 524288; ~2.5 KiB each), so the
  /// store cannot take the descriptors the rendezvous and the workers' pipes need. Connections
  /// handed over from the rendezvous's port count too.
  size_t max_connections = 0;
  /// From one address; 0: half of max_connections, or all of them up to 4096 (a big node's
  /// workers all come from one address).
  size_t max_per_address = 0;
  /// Replies queued behind the one being written, for one client: the reply in progress is not
  /// counted, so a GET of a value of max_value bytes is legal.
  uint64_t max_unsent = 64ull << 20;
  uint64_t max_unsent_total = 1ull << 30;     ///< replies not yet written, all clients together
  uint64_t max_buffered_total = 1ull << 30;   ///< requests in progress, all clients together
  std::chrono::milliseconds accept_backoff{100};  ///< accept() out of descriptors: wait, then retry
  std::chrono::seconds log_interval{10};          ///< at most one line per interval about drops
};

struct ServerStats {
  size_t accept_failures = 0;  ///< accept() errors, out of descriptors among them
  size_t refused = 0;          ///< connections closed at once: past max_connections or max_per_address
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
  /// A client accepted elsewhere (from `peer`, TCP_NODELAY set as the rendezvous sets it), with the
  /// bytes already read from it.
  void adopt(boost::asio::ip::tcp::socket socket, const boost::asio::ip::address& peer,
             std::vector<uint8_t> first_bytes);
  /// A new worker group: keys, queues and waits go, and the old group's connections are closed, so
  /// a wait still pending fails in its client instead of being answered by the new group's keys.
  void reset();
  /// Stops accepting and closes every connection.
  void close();
  /// Calls `fn` with the value each time a client sets `key`, under any prefix: torch's clients
  /// put "/" before every key, and its PrefixStores more (torch's NCCL watchdog sets
  /// /exception_dump when a collective timed out). One watch per key; the latest wins.
  void watch(std::string key, std::function<void(const std::string& value)> fn);

  int port() const;  ///< of serve()'s acceptor; 0 before
  const ServerOptions& options() const;  ///< as given, with the caps of 0 worked out
  size_t connections() const;
  /// Clients connected from `peer` now.
  size_t connections_from(const boost::asio::ip::address& peer) const;
  const StoreState& state() const;
  const ServerStats& stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::store
