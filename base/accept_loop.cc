#include "base/accept_loop.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include <boost/asio/post.hpp>

namespace dtl::net {
namespace asio = boost::asio;
namespace {

/// accept4's errors that belong to one connection, gone before it was taken (accept(2): "treat
/// them like EAGAIN by retrying"); the others would fail again at once. Not EPERM: a security
/// module's refusal comes before the connection leaves the backlog, and would come again at once.
bool one_client(int err) {
  switch (err) {
    case ECONNABORTED: case EPROTO: case ENETDOWN: case ENOPROTOOPT: case EHOSTDOWN:
    case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
      return true;
    default:
      return false;
  }
}

}  // namespace

void close_on_exec(int fd) { ::fcntl(fd, F_SETFD, FD_CLOEXEC); }

template <class Protocol>
std::shared_ptr<BasicAcceptLoop<Protocol>> BasicAcceptLoop<Protocol>::start(acceptor_type acceptor, Options options,
                                                                            Handlers handlers) {
  auto loop = std::make_shared<BasicAcceptLoop>(std::move(acceptor), options, std::move(handlers));
  loop->take();
  return loop;
}

template <class Protocol>
BasicAcceptLoop<Protocol>::BasicAcceptLoop(acceptor_type acceptor, Options options, Handlers handlers)
    : acceptor_(std::move(acceptor)),
      pause_(acceptor_.get_executor()),
      options_(options),
      handlers_(std::move(handlers)) {
  // accept4 below must say EAGAIN when the backlog is empty, not block the io_context.
  acceptor_.non_blocking(true);
  if constexpr (std::is_same_v<Protocol, asio::ip::tcp>) port_ = acceptor_.local_endpoint().port();
}

template <class Protocol>
void BasicAcceptLoop<Protocol>::stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  pause_.cancel();
}

template <class Protocol>
void BasicAcceptLoop<Protocol>::take() {
  for (size_t i = 0; i < options_.batch && !stopped_; ++i) {
    endpoint_type peer;
    socklen_t size = static_cast<socklen_t>(peer.capacity());
    const int fd = ::accept4(acceptor_.native_handle(), peer.data(), &size, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return wait();
      if (err == EINTR) continue;
      const bool paused = !one_client(err);
      handlers_.failed(boost::system::error_code(err, boost::system::system_category()), paused);
      if (stopped_) return;
      if (paused) return pause();
      continue;
    }
    peer.resize(size);
    socket_type socket(acceptor_.get_executor());
    boost::system::error_code ec;
    socket.assign(peer.protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      handlers_.failed(ec, false);
      continue;
    }
    handlers_.accepted(std::move(socket), peer);
  }
  if (stopped_) return;
  // A full batch: the rest after what else is ready (the other port's clients, timers, signals).
  asio::post(acceptor_.get_executor(), [self = this->shared_from_this()] {
    if (!self->stopped_) self->take();
  });
}

template <class Protocol>
void BasicAcceptLoop<Protocol>::wait() {
  acceptor_.async_wait(acceptor_type::wait_read, [self = this->shared_from_this()](const boost::system::error_code& ec) {
    if (self->stopped_ || ec == asio::error::operation_aborted) return;
    if (!ec) return self->take();
    self->handlers_.failed(ec, true);
    if (!self->stopped_) self->pause();
  });
}

template <class Protocol>
void BasicAcceptLoop<Protocol>::pause() {
  pause_.expires_after(options_.backoff);
  pause_.async_wait([self = this->shared_from_this()](const boost::system::error_code& e) {
    if (!e && !self->stopped_) self->take();
  });
}

template class BasicAcceptLoop<asio::ip::tcp>;
template class BasicAcceptLoop<asio::local::stream_protocol>;

}  // namespace dtl::net
