#include "rendezvous/server.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "rendezvous/auth.h"

namespace dtl::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr const char* kClosed = "connection closed";

/// One peer. Reads are small (joins are ~200 bytes) so thousands of nodes stay cheap.
struct Conn {
  Conn(tcp::socket s, NodeId id) : sock(std::move(s)), id(id) {}
  tcp::socket sock;
  NodeId id;
  ServerHandshake shake;
  bool closing = false;  ///< nothing more is read; the socket closes once the queue is written
  FrameDecoder decoder;
  std::array<uint8_t, 2048> buf;
  std::optional<Bytes> first;  ///< with a shared port: the bytes read until they say whose they are
  std::deque<Bytes> out;
  bool writing = false;
  std::string peer;
  Clock::time_point connected, last_heard, last_sent;
  int frames = 0;  ///< in this heartbeat interval
  bool joined() const { return !closing && shake.phase == ServerHandshake::Phase::joined; }
};

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(asio::io_context& io, ServerOptions o)
      : io(io),
        opts(std::move(o)),
        acceptor(io),
        round(opts.round, Clock::now()),
        round_timer(io),
        sweep_timer(io),
        silence_timer(io) {}

  asio::io_context& io;
  ServerOptions opts;
  tcp::acceptor acceptor;
  RoundState round;
  asio::steady_timer round_timer;
  asio::steady_timer sweep_timer;
  asio::steady_timer silence_timer;  ///< just past the earliest silence limit, when it falls between sweeps
  std::map<NodeId, std::shared_ptr<Conn>> conns;
  NodeId next_id = 1;
  bool finished = false;
  bool stopped = false;
  std::function<void()> on_empty;
  std::function<void()> on_finished;

  void bind() {
    boost::system::error_code ec;
    tcp::endpoint ep(tcp::v4(), static_cast<unsigned short>(opts.port));
    if (!opts.host.empty()) {
      tcp::resolver resolver(io);
      auto found = resolver.resolve(opts.host, std::to_string(opts.port), tcp::resolver::numeric_service, ec);
      if (ec || found.empty()) throw std::runtime_error("cannot resolve the rendezvous address '" + opts.host + "'");
      ep = found.begin()->endpoint();
    }
    acceptor.open(ep.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(ep, ec);
    if (ec == asio::error::address_in_use) {
      throw PortInUse("the rendezvous port " + std::to_string(opts.port) + " is already in use on " +
                      (opts.host.empty() ? "this machine" : opts.host));
    }
    if (ec) throw std::runtime_error("cannot listen on " + opts.host + ":" + std::to_string(opts.port) + ": " + ec.message());
    acceptor.listen(asio::socket_base::max_listen_connections);
    if (opts.credentials.token.empty()) {
      spdlog::warn("rendezvous: no {}: any host that reaches this port can join", opts.credentials.token_name);
    }
  }

  void start() {
    accept();
    sweep();
    apply(round.on_tick(Clock::now()));
  }

  void shutdown() {
    stopped = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    round_timer.cancel();
    sweep_timer.cancel();
    silence_timer.cancel();
    for (auto& [id, c] : conns) c->sock.close(ignored);
    conns.clear();
  }

  void accept() {
    acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket sock) {
      if (self->stopped) return;
      if (!ec) self->add(std::move(sock));
      if (ec != asio::error::operation_aborted) self->accept();
    });
  }

  void add(tcp::socket sock) {
    boost::system::error_code ec;
    sock.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Conn>(std::move(sock), next_id++);
    auto remote = c->sock.remote_endpoint(ec);
    c->peer = ec ? "?" : remote.address().to_string();
    c->connected = c->last_heard = c->last_sent = Clock::now();
    if (opts.shared_port) c->first.emplace();
    conns[c->id] = c;
    read(c);
  }

  void read(const std::shared_ptr<Conn>& c) {
    c->sock.async_read_some(asio::buffer(c->buf), [self = shared_from_this(), c](const boost::system::error_code& ec,
                                                                                size_t n) {
      if (self->stopped || c->closing) return;
      if (ec) {
        self->drop(c, ec == asio::error::eof ? kClosed : ec.message());
        return;
      }
      c->last_heard = Clock::now();
      const uint8_t* data = c->buf.data();
      if (const auto& shared = self->opts.shared_port; shared && c->first) {
        c->first->insert(c->first->end(), data, data + n);
        auto theirs = shared->claims(c->first->data(), c->first->size());
        if (!theirs) return self->read(c);
        if (*theirs) return self->hand_over(c);
        data = c->first->data();
        n = c->first->size();
      }
      std::vector<Message> msgs;
      auto err = c->decoder.feed(data, n, msgs);
      c->first.reset();
      for (auto& m : msgs) {
        if (c->closing || !self->conns.count(c->id)) return;
        ++c->frames;
        self->handle(c, m);
      }
      if (err) {
        self->drop(c, "bad frame: " + err->what);
        return;
      }
      if (self->conns.count(c->id) && !c->closing) self->read(c);
    });
  }

  void send(const std::shared_ptr<Conn>& c, Bytes frame) {
    c->out.push_back(std::move(frame));
    c->last_sent = Clock::now();
    if (!c->writing) write(c);
  }

  void write(const std::shared_ptr<Conn>& c) {
    if (c->out.empty()) {
      c->writing = false;
      if (c->closing) close(c);
      return;
    }
    c->writing = true;
    asio::async_write(c->sock, asio::buffer(c->out.front()),
                      [self = shared_from_this(), c](const boost::system::error_code& ec, size_t) {
                        if (self->stopped) return;
                        c->out.pop_front();
                        if (ec) {
                          c->out.clear();
                          c->writing = false;
                          if (!c->closing) self->drop(c, "write failed: " + ec.message());
                          else self->close(c);
                          return;
                        }
                        self->write(c);
                      });
  }

  void close(const std::shared_ptr<Conn>& c) {
    boost::system::error_code ignored;
    c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    c->sock.close(ignored);
    conns.erase(c->id);
    if (conns.empty() && on_empty) std::exchange(on_empty, nullptr)();
  }

  /// A connection of the protocol sharing the port leaves the rendezvous, socket open.
  void hand_over(const std::shared_ptr<Conn>& c) {
    c->closing = true;
    conns.erase(c->id);
    opts.shared_port->take(std::move(c->sock), std::move(*c->first));
    if (conns.empty() && on_empty) std::exchange(on_empty, nullptr)();
  }

  /// Stop talking to a peer: what it was in the round is lost.
  void drop(const std::shared_ptr<Conn>& c, const std::string& why) {
    if (!conns.count(c->id)) return;
    const bool joined = c->joined();
    auto hangup = why == kClosed ? server_hangup(opts.credentials, c->shake) : std::nullopt;
    if (hangup) {
      spdlog::warn("rendezvous: {} {}", c->peer, *hangup);
    } else if (!joined) {
      spdlog::info("rendezvous: dropped {} before it joined: {}", c->peer, why);
    }
    c->closing = true;
    // A write in flight still reads the front buffer: its handler, which closing the socket makes
    // run with an error, clears the queue.
    if (!c->writing) c->out.clear();
    close(c);
    if (joined) apply(round.on_lost(c->id, why, Clock::now()));
  }

  /// A message of the handshake: the state machine decides, this carries out.
  void handshake(const std::shared_ptr<Conn>& c, const Message& m) {
    const bool hello = c->shake.phase == ServerHandshake::Phase::hello;
    ServerStep step = server_step(opts.credentials, c->shake, m, hello ? random_nonce() : Nonce{});
    if (step.dropped) return drop(c, *step.dropped);
    c->shake = step.next;
    for (const auto& reply : step.send) send(c, encode(reply));
    if (step.refused) {
      spdlog::warn("rendezvous: refused {}: {}", c->peer, *step.refused);
      c->closing = true;
    }
    if (step.joined) apply(round.on_join(c->id, Member{std::move(*step.joined), c->peer}, Clock::now()));
  }

  void handle(const std::shared_ptr<Conn>& c, const Message& m) {
    if (c->closing) return;
    if (!c->joined()) return handshake(c, m);
    const auto now = Clock::now();
    if (std::holds_alternative<Heartbeat>(m)) return;
    if (auto* f = std::get_if<Failed>(&m)) return apply(round.on_failed(c->id, f->failures, now));
    if (std::holds_alternative<Stopped>(m)) return apply(round.on_stopped(c->id, now));
    if (std::holds_alternative<Done>(m)) return apply(round.on_done(c->id, now));
    drop(c, std::string("unexpected ") + message_name(m));
  }

  void apply(RoundState::Actions a) {
    for (const auto& line : a.log) spdlog::info("rendezvous: {}", line);
    if (opts.on_round && std::any_of(a.send.begin(), a.send.end(),
                                     [](const auto& s) { return std::holds_alternative<Round>(s.second); })) {
      opts.on_round();
    }
    for (auto& [id, msg] : a.send) {
      auto it = conns.find(id);
      if (it != conns.end()) send(it->second, encode(msg));
    }
    for (NodeId id : a.drop) {
      auto it = conns.find(id);
      if (it == conns.end()) continue;
      it->second->closing = true;
      if (!it->second->writing) close(it->second);
    }
    if (a.finished) {
      finished = true;
      if (on_finished) std::exchange(on_finished, nullptr)();
    }
    if (a.wake_at) {
      round_timer.expires_at(*a.wake_at);
      round_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec && !self->stopped) self->apply(self->round.on_tick(Clock::now()));
      });
    }
  }

  /// Once per heartbeat interval: heartbeats to idle peers, and the silent, slow or flooding dropped.
  void sweep() {
    sweep_timer.expires_after(opts.liveness.interval);
    sweep_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      const auto now = Clock::now();
      std::vector<std::pair<std::shared_ptr<Conn>, std::string>> doomed;
      for (auto& [id, c] : self->conns) {
        if (c->closing) continue;
        if (!c->joined() && now - c->connected > self->opts.handshake_timeout) {
          doomed.emplace_back(c, "no handshake within " + std::to_string(self->opts.handshake_timeout.count()) + " ms");
        } else if (auto silent = self->silence(*c, now)) {
          doomed.emplace_back(c, *silent);
        } else if (c->frames > self->opts.max_frames_per_interval) {
          doomed.emplace_back(c, "flooding: " + std::to_string(c->frames) + " frames in one heartbeat interval");
        } else if (c->joined() && now - c->last_sent >= self->opts.liveness.interval) {
          self->send(c, encode(Heartbeat{}));
        }
        c->frames = 0;
      }
      for (auto& [c, why] : doomed) self->drop(c, why);
      self->sweep();
      self->watch_silence(now);
    });
  }

  /// Why a joined peer counts as lost for its silence, if it does.
  std::optional<std::string> silence(const Conn& c, Clock::time_point now) const {
    if (!c.joined() || now - c.last_heard <= opts.liveness.silence_limit()) return std::nullopt;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c.last_heard).count();
    return "silent for " + std::to_string(ms) + " ms (no heartbeat)";
  }

  /// The sweep notices a silent node up to one interval late: when a joined node's silence limit
  /// falls before the next sweep, look again just past it (rarely: only once a node has been silent
  /// for all but one interval of the limit).
  void watch_silence(Clock::time_point now) {
    std::optional<Clock::time_point> earliest;
    for (auto& [id, c] : conns) {
      if (c->joined() && (!earliest || c->last_heard < *earliest)) earliest = c->last_heard;
    }
    if (!earliest) return;
    const auto at = *earliest + opts.liveness.silence_limit() + std::chrono::milliseconds(1);
    if (at >= now + opts.liveness.interval) return;
    silence_timer.expires_at(at);
    silence_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      const auto now = Clock::now();
      std::vector<std::pair<std::shared_ptr<Conn>, std::string>> doomed;
      for (auto& [id, c] : self->conns) {
        if (auto silent = self->silence(*c, now)) doomed.emplace_back(c, *silent);
      }
      for (auto& [c, why] : doomed) self->drop(c, why);
      self->watch_silence(now);
    });
  }
};

Server::Server(asio::io_context& io, ServerOptions options) : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->bind();
  impl_->start();
}
Server::~Server() { impl_->shutdown(); }
int Server::port() const { return impl_->acceptor.local_endpoint().port(); }
size_t Server::connections() const { return impl_->conns.size(); }
bool Server::finished() const { return impl_->finished; }
int Server::exit_code() const { return impl_->round.exit_code(); }
void Server::end_job(const std::string& reason) { impl_->apply(impl_->round.on_shutdown(reason)); }
void Server::when_finished(std::function<void()> done) {
  if (impl_->finished) return done();
  impl_->on_finished = std::move(done);
}
void Server::when_empty(std::function<void()> done) {
  if (impl_->conns.empty()) return done();
  impl_->on_empty = std::move(done);
}

}  // namespace dtl::rendezvous
