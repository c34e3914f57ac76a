#include "store/server.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "base/accept_loop.h"
#include "base/posix.h"

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
  asio::ip::address source;  ///< the peer's, for max_per_address
  std::string pending;   ///< replies not yet handed to the socket
  std::string inflight;  ///< what async_write is writing
  bool writing = false;
  bool closed = false;
  size_t counted = 0;  ///< decoder.buffered() as last added to Impl::buffered
};

/// max_connections when not given: half the descriptors this process may open.
size_t connections_from_fd_limit() {
  constexpr size_t kMost = size_t{1} << 18;
  return std::clamp<size_t>(posix::fd_limit() / 2, 1, kMost);
}

/// Lines about refused and dropped clients, at most one per interval, so that a flood of bad
/// connections cannot flood the agent's console: the first after a quiet interval is said in
/// full; the rest are counted and their number said with the next line or at close. (The
/// rendezvous's PeerLog does this with a timer, but store/ imports nothing above base/.)
class DropLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DropLog(Clock::duration interval) : interval_(interval) {}
  void note(const std::string& line) {
    const auto now = Clock::now();
    if (last_ && now - *last_ < interval_) {
      ++held_;
      return;
    }
    flush();
    spdlog::warn("store: {}", line);
    last_ = now;
  }
  void flush() {
    if (held_ == 0) return;
    spdlog::warn("store: {} more refused or dropped connections, or failed accepts, since the last line", held_);
    held_ = 0;
  }

 private:
  Clock::duration interval_;
  std::optional<Clock::time_point> last_;
  size_t held_ = 0;
};

/// Boost 1.74's address has no std::hash.
struct AddressHash {
  size_t operator()(const asio::ip::address& a) const {
    if (a.is_v4()) return std::hash<uint32_t>{}(a.to_v4().to_uint());
    const auto b = a.to_v6().to_bytes();
    return std::hash<std::string_view>{}({reinterpret_cast<const char*>(b.data()), b.size()});
  }
};

ServerOptions derived(ServerOptions o) {
  if (o.max_connections == 0) o.max_connections = connections_from_fd_limit();
  if (o.max_per_address == 0) {
    o.max_per_address = std::max(o.max_connections / 2, std::min<size_t>(o.max_connections, 4096));
  }
  o.state.max_value = o.limits.max_value;
  return o;
}

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
  net::close_on_exec(acceptor.native_handle());
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
  Impl(asio::io_context& io, ServerOptions o)
      : io(io), opts(derived(std::move(o))), state(opts.state), log(opts.log_interval) {}

  asio::io_context& io;
  ServerOptions opts;
  StoreState state;
  std::shared_ptr<net::AcceptLoop> accepting;  ///< serve()'s port; none when clients are adopted
  DropLog log;
  ServerStats stats;
  std::unordered_map<ClientId, std::shared_ptr<Conn>> conns;
  std::unordered_map<asio::ip::address, size_t, AddressHash> per_address;  ///< connections now, by source address
  ClientId next_id = 1;
  uint64_t buffered = 0;
  uint64_t unsent = 0;  ///< replies not yet written, all clients
  bool stopped = false;
  std::vector<Request> requests;  ///< reused between reads
  std::vector<Outgoing> outgoing;
  std::vector<std::pair<std::string, std::function<void(const std::string&)>>> watches;  ///< Server::watch's

  /// The watch for `key`: its name, under any prefix ("/exception_dump" from torch's TCPStore).
  const std::function<void(const std::string&)>* watcher(const std::string& key) const {
    for (const auto& [name, fn] : watches) {
      if (key.ends_with(name) && (key.size() == name.size() || key[key.size() - name.size() - 1] == '/')) return &fn;
    }
    return nullptr;
  }

  /// The loop calls these only until close(), which stops it: `this` is alive.
  void serve(tcp::acceptor acceptor) {
    // After close() a loop would never be stopped and would outlive this Impl: the acceptor
    // closes as it goes. A second serve() replaces the first loop, stopped.
    if (stopped) return;
    if (accepting) accepting->stop();
    accepting = net::AcceptLoop::start(
        std::move(acceptor), {opts.accept_backoff},
        {[this](tcp::socket sock, const tcp::endpoint& peer) {
           boost::system::error_code ignored;
           sock.set_option(tcp::no_delay(true), ignored);  // replies are small and awaited one by one
           add(std::move(sock), peer.address(), {});
         },
         [this](const boost::system::error_code& ec, bool paused) {
           ++stats.accept_failures;
           if (paused) {
             log.note("cannot accept connections: " + ec.message() + "; trying again every " +
                      std::to_string(opts.accept_backoff.count()) + " ms");
           }
         }});
  }

  void add(tcp::socket sock, const asio::ip::address& source, const std::vector<uint8_t>& first) {
    auto here = per_address.find(source);
    const size_t from_source = here == per_address.end() ? 0 : here->second;
    if (conns.size() >= opts.max_connections || from_source >= opts.max_per_address) {
      ++stats.refused;
      log.note("refused a connection from " + source.to_string() + ": " + std::to_string(from_source) +
               " connected from its address, " + std::to_string(conns.size()) + " in all (at most " +
               std::to_string(opts.max_per_address) + " and " + std::to_string(opts.max_connections) + ")");
      return;  // the socket closes as it goes
    }
    auto c = std::make_shared<Conn>(std::move(sock), next_id++, opts.limits);
    ++per_address[source];
    c->source = source;
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
      // handle() moves the value into the store: a watched one is copied first.
      const std::function<void(const std::string&)>* watch = r.op == Op::set ? watcher(r.keys.front()) : nullptr;
      const std::string watched = watch ? r.values.front() : std::string();
      auto refused = state.handle(c->id, r, outgoing);
      for (auto& o : outgoing) send(o.to, std::move(o.bytes));
      if (refused) {
        drop(c, *refused);
        return false;
      }
      if (watch) (*watch)(watched);
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
    unsent += bytes.size();
    // What queues behind the write in progress: counting that write too dropped a client for one
    // legal GET of a value near max_value.
    if (c->writing && c->pending.size() > opts.max_unsent) {
      return drop(c, "does not read its replies (" + std::to_string(opts.max_unsent) + " bytes unsent)");
    }
    if (unsent > opts.max_unsent_total) {
      return drop(c, "replies unsent to all clients pass " + std::to_string(opts.max_unsent_total) + " bytes");
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
                        if (self->stopped || c->closed) return;  // drop() or close_all() counted it
                        self->unsent -= c->inflight.size();
                        c->inflight.clear();
                        if (ec) return self->drop(c, "write failed: " + ec.message());
                        self->write(c);
                      });
  }

  /// Ends a client's connection; `why` empty: it hung up.
  void drop(const std::shared_ptr<Conn>& c, const std::string& why) {
    if (c->closed) return;
    c->closed = true;
    if (!why.empty()) log.note("dropped " + c->source.to_string() + ": " + why);
    boost::system::error_code ignored;
    c->sock.close(ignored);
    buffered -= c->counted;
    c->counted = 0;
    unsent -= c->pending.size() + c->inflight.size();
    if (auto it = per_address.find(c->source); it != per_address.end() && --it->second == 0) per_address.erase(it);
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
    unsent = 0;
    per_address.clear();
  }
};

Server::Server(asio::io_context& io, ServerOptions options) : impl_(std::make_shared<Impl>(io, std::move(options))) {}

Server::~Server() { close(); }

void Server::serve(tcp::acceptor acceptor) { impl_->serve(std::move(acceptor)); }

void Server::adopt(tcp::socket socket, const asio::ip::address& peer, std::vector<uint8_t> first_bytes) {
  if (impl_->stopped) return;
  impl_->add(std::move(socket), peer, first_bytes);
}

void Server::watch(std::string key, std::function<void(const std::string&)> fn) {
  auto& watches = impl_->watches;
  std::erase_if(watches, [&](const auto& w) { return w.first == key; });
  watches.emplace_back(std::move(key), std::move(fn));
}

void Server::reset() {
  impl_->close_all();
  impl_->state.clear();
}

void Server::close() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->accepting) impl_->accepting->stop();
  impl_->close_all();
  impl_->log.flush();
}

int Server::port() const { return impl_->accepting ? impl_->accepting->port() : 0; }
size_t Server::connections() const { return impl_->conns.size(); }
size_t Server::connections_from(const asio::ip::address& peer) const {
  const auto it = impl_->per_address.find(peer);
  return it == impl_->per_address.end() ? 0 : it->second;
}
const ServerOptions& Server::options() const { return impl_->opts; }
const StoreState& Server::state() const { return impl_->state; }
const ServerStats& Server::stats() const { return impl_->stats; }

}  // namespace dtl::store
