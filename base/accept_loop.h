// Taking connections in an io_context, written once for the rendezvous's port and the store's (TCP)
// and `dtlaunch stacks`' socket (Unix): every connection waiting is taken when the listening socket
// wakes up (accept4: close-on-exec and the peer's address come with it, no fcntl or getpeername per
// client, no trip through the scheduler per client), at most Options::batch before other handlers
// run, and a pause instead of a spin when the process is out of descriptors (the connection stays
// in the backlog, and accept() would fail again at once).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dtl::net {

template <class Protocol>
class BasicAcceptLoop : public std::enable_shared_from_this<BasicAcceptLoop<Protocol>> {
 public:
  using socket_type = typename Protocol::socket;
  using endpoint_type = typename Protocol::endpoint;
  using acceptor_type = typename Protocol::acceptor;
  struct Options {
    std::chrono::milliseconds backoff{100};  ///< after accept() ran out of descriptors or memory
    size_t batch = 256;                      ///< connections taken before other handlers get a turn
  };
  struct Handlers {
    /// A new connection: non-blocking, close-on-exec, `peer` its remote address.
    std::function<void(socket_type socket, const endpoint_type& peer)> accepted;
    /// accept() failed. `paused`: not for one client's sake (out of descriptors or memory, or the
    /// listening socket broke), so the loop waits Options::backoff before it tries again.
    std::function<void(const boost::system::error_code& error, bool paused)> failed;
  };

  /// Starts taking connections on `acceptor` (bound and listening).
  static std::shared_ptr<BasicAcceptLoop> start(acceptor_type acceptor, Options options, Handlers handlers);
  BasicAcceptLoop(acceptor_type acceptor, Options options, Handlers handlers);

  /// Closes the listening socket; no handler is called after this.
  void stop();
  int port() const { return port_; }  ///< the TCP port it listens on, also after stop(); 0 for Unix

 private:
  void take();
  void wait();
  void pause();

  acceptor_type acceptor_;
  boost::asio::steady_timer pause_;
  Options options_;
  Handlers handlers_;
  int port_ = 0;
  bool stopped_ = false;
};

using AcceptLoop = BasicAcceptLoop<boost::asio::ip::tcp>;
using LocalAcceptLoop = BasicAcceptLoop<boost::asio::local::stream_protocol>;

/// Close-on-exec for a socket Asio opened (it never asks for it): the hosting agent's workers must
/// not hold the rendezvous's or the store's listening socket.
void close_on_exec(int fd);

}  // namespace dtl::net
