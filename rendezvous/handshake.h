// The rendezvous handshake as a pure state machine, apart from the sockets (as Asio's examples keep
// request_parser apart from the connection): hello, challenge with the server's proof, join with
// the client's proof. Each side is a function of (state, message) that returns the next state, the
// messages to send and, when it ends the connection, why. Nonces come in as arguments, so tests
// drive both sides without sockets or randomness; server.cc and client.cc only carry the bytes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/protocol.h"
#include "base/printable.h"

namespace dtl::rendezvous {

/// What both sides must share to meet: the job's run id and the token (empty: unauthenticated).
struct Credentials {
  std::string run_id = "none";
  std::string token;
  /// What messages call the token: the caller's word for it (the launcher says "--rdzv_token").
  std::string token_name = "token";
};

/// The server's side of one connection.
struct ServerHandshake {
  enum class Phase { hello, challenged, joined } phase = Phase::hello;
  Nonce client_nonce{}, server_nonce{};
};

/// A refusal's reason as a client prints it: longer ones are cut.
inline constexpr size_t kMaxRefusal = 1000;

/// What the server does with one message from a peer that has not joined yet.
struct ServerStep {
  ServerHandshake next;
  /// What a peer that has not proven the token is told names nothing of the job: not its run id,
  /// not where the host's token came from.
  std::vector<Message> send;
  /// A Refused is in `send`: close once it is out. This is why, for the host's log (it may name the
  /// job's run id, and the peer's text in it is printable()).
  std::optional<std::string> refused;
  std::optional<std::string> dropped;  ///< the peer broke the protocol: close without a word
  std::optional<Join> joined;          ///< authenticated: this join goes to the round
};

/// One message in phase hello or challenged. `fresh` is the nonce the challenge uses (random for
/// each connection; it counts only in phase hello).
ServerStep server_step(const Credentials& server, const ServerHandshake& state, const Message& m,
                       const Nonce& fresh);

/// Why a peer that hung up mid-handshake most likely did, for the server's log; none when its
/// hanging up says nothing (it had not seen the challenge yet, or had joined).
std::optional<std::string> server_hangup(const Credentials& server, const ServerHandshake& state);

/// The client's side of its connection.
struct ClientHandshake {
  enum class Phase { hello_sent, joined } phase = Phase::hello_sent;
  Nonce nonce{};  ///< this client's, sent in the hello
};

/// What the client does with one message.
struct ClientStep {
  ClientHandshake next;
  std::vector<Message> send;
  std::optional<std::string> refused;  ///< refused, or the server failed its proof: fatal, bad input
  std::optional<std::string> failed;   ///< the server broke the protocol: fatal, not refused
  bool forward = false;  ///< joined, and `m` is the session's (round, stop, exit, heartbeat), not the handshake's
};

/// The connection is up: the hello, sent with the client's fresh nonce.
ClientStep client_start(const Credentials& client, const Nonce& nonce);

/// One message from the server. `join` is what this node joins with (its proof is filled in here).
ClientStep client_step(const Credentials& client, const ClientHandshake& state, const Message& m, const Join& join);

}  // namespace dtl::rendezvous
