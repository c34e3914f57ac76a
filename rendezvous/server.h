// The rendezvous server: Boost.Asio TCP in the caller's io_context (inside the hosting agent, or
// `dtlaunch rdzv-server`). It authenticates nodes, feeds RoundState and sends what it decides;
// a peer that sends garbage, floods, stalls or goes quiet loses its connection, nobody else.
// Peers that have not proven the token get a bounded share of descriptors and time (Admission),
// and what they do is logged in aggregate (PeerLog), escaped.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/admission.h"
#include "rendezvous/handshake.h"
#include "rendezvous/round_state.h"

namespace dtl::rendezvous {

struct ServerOptions {
  std::string host;  ///< address to bind; empty: every interface
  int port = 29400;
  Credentials credentials;  ///< no token: unauthenticated (said once in the log)
  RoundConfig round;
  Liveness liveness;
  /// Caps and deadline for connections that have not proven the token; none: from the process's
  /// fd limit when the server starts (admission_limits).
  std::optional<AdmissionLimits> admission;
  int max_frames_per_interval = 1000;
  /// Lines about peers that have not proven the token: at most one per interval.
  std::chrono::milliseconds peer_log_interval{10000};
  /// Descriptors ran out (EMFILE): accept again after this, rather than at once.
  std::chrono::milliseconds accept_backoff{100};
  /// Another protocol on this port (the workers' c10d store): `claims` looks at a connection's first
  /// bytes and says whether they are the other protocol's (nullopt: it needs more); such a
  /// connection goes to `take` with its peer and the bytes read so far, and the rendezvous forgets it.
  struct SharedPort {
    std::function<std::optional<bool>(const uint8_t* data, size_t size)> claims;
    std::function<void(boost::asio::ip::tcp::socket, const boost::asio::ip::tcp::endpoint& peer,
                       std::vector<uint8_t> first_bytes)>
        take;
    /// How many connections the other protocol keeps from anyone, in all and from one address (the
    /// store has no authentication). Connections not yet told apart may be as many: a job's workers
    /// connect to the store all at once, past the rendezvous's own caps for peers that have not
    /// proven the token.
    size_t connections = 0;
    size_t per_address = 0;
    /// Whether the other protocol has a client connected from this address: a connection from it
    /// that never spoke is that client's second one (torch 1.13's TCPStore opens one for its watched
    /// keys and says nothing on it), and goes to it rather than being dropped.
    std::function<bool(const boost::asio::ip::address& peer)> has_client;
  };
  std::optional<SharedPort> shared_port;
  /// Called as a round completes, before any node hears of it: a new worker group is to start.
  std::function<void()> on_round;
  /// A node's hang watch asked for every node's stacks (StacksWanted of kGatherHang): each node's
  /// part as it came, and the nodes that did not answer in time ("" when none). At most once a
  /// round; without it such asks are ignored. Other asks go back to the asker.
  std::function<void(std::vector<std::string> parts, const std::string& missing)> on_hang_stacks;
  std::chrono::milliseconds stacks_timeout{25000};  ///< for every node's part
  std::chrono::milliseconds ranks_timeout{3000};    ///< for every node's figures (kGatherRanks): no stack to read
};

/// What the server has done, for tests and benchmarks.
struct ServerStats {
  size_t accepted = 0;         ///< connections accepted
  size_t shed = 0;             ///< closed at once, or later to make room, for the caps
  size_t accept_failures = 0;  ///< accept() calls that failed (EMFILE and the like)
  size_t members = 0;          ///< connections that proved the token, now
  size_t unauthenticated = 0;  ///< connections that have not, now
};

/// The rendezvous port is taken (by another agent on this machine, often).
struct PortInUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Server {
 public:
  /// Binds at once; throws std::runtime_error with one line ("... is already in use") on failure.
  Server(boost::asio::io_context& io, ServerOptions options);
  ~Server();
  int port() const;
  /// Connections of nodes that proved the token (joined), those still being answered included.
  size_t connections() const;
  ServerStats stats() const;
  /// The job is over (Exit went out), and the code the nodes were told to exit with.
  bool finished() const;
  int exit_code() const;
  /// Calls `done` once no node that proved the token is connected (at once if none is): the hosting
  /// agent waits for this before leaving, so every node gets its Exit. Peers that never proved it
  /// are not waited for.
  void when_empty(std::function<void()> done);
  /// Calls `done` once the job is over (at once if it is).
  void when_finished(std::function<void()> done);
  /// Ends the job (Exit with code 1 and `reason` to every node) unless it is already over.
  void end_job(const std::string& reason);
  /// Sends `verdict` to every node that joined: the one running its rank fails it.
  void announce(const HangVerdict& verdict);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::rendezvous
