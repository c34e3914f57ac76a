#include "store/server.h"

#include <array>
#include <unordered_map>

#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

namespace dtl::store {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

/// One client. Small: a read buffer, the decoder's request in progress, and unsent replies.
struct Conn {
  Conn(tcp::socket s, ClientId id, const Limits& limits) : sock(std::move(s)), id(id), decoder(limits) {}
  tcp::socket sock;
  ClientId id;
  RequestDecoder decoder;
  std::array<uint8_t, 1024> buf;
  std::string pending;   ///< replies not yet handed to the socket
  std::string inflight;  ///< what async_write is writing
  bool writing = false;
  bool closed = false;
  size_t counted = 0;  ///< decoder.buffered() as last added to Impl::buffered
};

}  // namespace

tcp::acceptor listen_on(asio::io_context& io, const std::string& host, int port) {
  boost::system::error_code ec;
  tcp::endpoint ep(tcp::v4(), static_cast<unsigned short>(port));
  if (!host.empty()) {
    tcp::resolver resolver(io);
    auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
    if (ec || found.empty()) throw std::runtime_error("cannot resolve the store's address '" + host + "'");
    ep = found.begin()->endpoint();
  }
  tcp::acceptor acceptor(io);
  acceptor.open(ep.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(ep, ec);
  if (ec) {
    throw std::runtime_error("cannot serve the store on " + (host.empty() ? std::string("*") : host) + ":" +
                             std::to_string(port) + ": " + ec.message());
  }
  acceptor.listen(asio::socket_base::max_listen_connections);
  return acceptor;
}

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(asio::io_context& io, ServerOptions o) : io(io), opts(std::move(o)), state(opts.state) {}

  asio::io_context& io;
  ServerOptions opts;
  StoreState state;
  std::optional<tcp::acceptor> acceptor;
  std::unordered_map<ClientId, std::shared_ptr<Conn>> conns;
  ClientId next_id = 1;
  uint64_t buffered = 0;
  bool stopped = false;
  std::vector<Request> requests;  ///< reused between reads
  std::vector<Outgoing> outgoing;

  void accept() {
    acceptor->async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket sock) {
      if (self->stopped) return;
      if (!ec) self->add(std::move(sock), {});
      if (ec != asio::error::operation_aborted) self->accept();
    });
  }

  void add(tcp::socket sock, const std::vector<uint8_t>& first) {
    if (conns.size() >= opts.max_connections) {
      spdlog::warn("store: refused a connection: {} clients connected already", conns.size());
      return;  // the socket closes as it goes
    }
    boost::system::error_code ec;
    sock.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Conn>(std::move(sock), next_id++, opts.limits);
    conns.emplace(c->id, c);
    if (!first.empty() && !received(c, first.data(), first.size())) return;
    read(c);
  }

  void read(const std::shared_ptr<Conn>& c) {
    c->sock.async_read_some(asio::buffer(c->buf), [self = shared_from_this(), c](const boost::system::error_code& ec,
                                                                                size_t n) {
      if (self->stopped || c->closed) return;
      if (ec) return self->drop(c, ec == asio::error::eof ? "" : ec.message());
      if (self->received(c, c->buf.data(), n)) self->read(c);
    });
  }

  /// Decodes and carries out what a client sent; false when the client was dropped for it.
  bool received(const std::shared_ptr<Conn>& c, const uint8_t* data, size_t n) {
    requests.clear();
    auto err = c->decoder.feed(data, n, requests);
    for (auto& r : requests) {
      outgoing.clear();
      auto refused = state.handle(c->id, r, outgoing);
      for (auto& o : outgoing) send(o.to, std::move(o.bytes));
      if (refused) {
        drop(c, *refused);
        return false;
      }
      if (c->closed) return false;
    }
    if (err) {
      drop(c, "not torch's store protocol: " + err->what);
      return false;
    }
    const size_t now = c->decoder.buffered();
    buffered = buffered - c->counted + now;
    c->counted = now;
    if (buffered > opts.max_buffered_total) {
      drop(c, "requests in progress hold over " + std::to_string(opts.max_buffered_total) + " bytes");
      return false;
    }
    return true;
  }

  void send(ClientId to, std::string bytes) {
    auto it = conns.find(to);
    if (it == conns.end()) return;
    auto c = it->second;
    c->pending.append(bytes);
    if (c->pending.size() + c->inflight.size() > opts.max_unsent) {
      return drop(c, "does not read its replies (" + std::to_string(opts.max_unsent) + " bytes unsent)");
    }
    if (!c->writing) write(c);
  }

  void write(const std::shared_ptr<Conn>& c) {
    if (c->pending.empty()) {
      c->writing = false;
      return;
    }
    c->writing = true;
    c->inflight.swap(c->pending);
    c->pending.clear();
    asio::async_write(c->sock, asio::buffer(c->inflight),
                      [self = shared_from_this(), c](const boost::system::error_code& ec, size_t) {
                        if (self->stopped || c->closed) return;
                        c->inflight.clear();
                        if (ec) return self->drop(c, "write failed: " + ec.message());
                        self->write(c);
                      });
  }

  /// Ends a client's connection; `why` empty: it hung up.
  void drop(const std::shared_ptr<Conn>& c, const std::string& why) {
    if (c->closed) return;
    c->closed = true;
    if (!why.empty()) {
      boost::system::error_code ec;
      auto peer = c->sock.remote_endpoint(ec);
      spdlog::warn("store: dropped {}: {}", ec ? std::string("a client") : peer.address().to_string(), why);
    }
    boost::system::error_code ignored;
    c->sock.close(ignored);
    buffered -= c->counted;
    c->counted = 0;
    state.forget(c->id);
    conns.erase(c->id);
  }

  void close_all() {
    auto all = std::move(conns);
    conns.clear();
    for (auto& [id, c] : all) {
      c->closed = true;
      boost::system::error_code ignored;
      c->sock.close(ignored);
    }
    buffered = 0;
  }
};

Server::Server(asio::io_context& io, ServerOptions options) : impl_(std::make_shared<Impl>(io, std::move(options))) {}

Server::~Server() { close(); }

void Server::serve(tcp::acceptor acceptor) {
  impl_->acceptor.emplace(std::move(acceptor));
  impl_->accept();
}

void Server::adopt(tcp::socket socket, std::vector<uint8_t> first_bytes) {
  if (impl_->stopped) return;
  impl_->add(std::move(socket), first_bytes);
}

void Server::reset() {
  impl_->close_all();
  impl_->state.clear();
}

void Server::close() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  boost::system::error_code ignored;
  if (impl_->acceptor) impl_->acceptor->close(ignored);
  impl_->close_all();
}

int Server::port() const { return impl_->acceptor ? impl_->acceptor->local_endpoint().port() : 0; }
size_t Server::connections() const { return impl_->conns.size(); }
const StoreState& Server::state() const { return impl_->state; }

}  // namespace dtl::store
