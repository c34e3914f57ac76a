// A node's side of the rendezvous: connects (retrying while the server is not up yet), proves the
// token, joins, and then relays what the server decides. Heartbeats both ways notice a lost peer.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/handshake.h"

namespace dtl::rendezvous {

struct ClientOptions {
  std::string host;
  int port = 29400;
  Credentials credentials;
  Join join;  ///< proof is filled in by the client
  std::chrono::milliseconds connect_timeout{600000};  ///< keep retrying a refused connection until then
  std::chrono::milliseconds retry_interval{100};
  Liveness liveness;
};

class Client {
 public:
  struct Callbacks {
    std::function<void(const Round&)> on_round;
    std::function<void(const Stop&)> on_stop;
    std::function<void(const Exit&)> on_exit;
    /// Fatal: refused (wrong token, run id, rank...), unreachable, or the server lost. One line.
    std::function<void(const std::string& why, bool refused)> on_error;
    /// Every node's stacks (protocol.h's StacksWanted): the server asks for this node's part (answer
    /// with a StacksPart of this id); parts of what this node asked for, then their end; a hang's
    /// verdict. Unset ones are ignored.
    std::function<void(const StacksAsk&)> on_stacks_ask;
    std::function<void(const StacksPart&)> on_stacks_part;
    std::function<void(const StacksEnd&)> on_stacks_end;
    std::function<void(const HangVerdict&)> on_hang_verdict;
  };

  Client(boost::asio::io_context& io, ClientOptions options, Callbacks callbacks);
  ~Client();
  void start();
  void send(const Message& m);
  void close();
  /// This end's address of the connection to the server ("10.0.0.2"), once connected; else "".
  std::string local_address() const;
  /// Sends `last` (a Leaving), then hangs up; no callback runs after this. Before the join, closes.
  void leave(const Message& last);
  /// Runs `done` (from the event loop) once a leave()'s last frame is out and the server has hung up,
  /// or the connection failed; at once when no leave() is under way.
  void after_last_word(std::function<void()> done);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::rendezvous
