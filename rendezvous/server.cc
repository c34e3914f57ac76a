#include "rendezvous/server.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "base/accept_loop.h"
#include "base/posix.h"
#include "rendezvous/auth.h"
#include "rendezvous/connection.h"
#include "rendezvous/peer_log.h"
#include "rendezvous/printable.h"
#include "base/printable.h"

namespace dtl::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxLogLine = 8192;


/// The caps on connections that have not proven the token: the given ones or the descriptor
/// limit's share, and with a shared port at least as many as the other protocol takes from anyone.
AdmissionLimits limits(const ServerOptions& o) {
  auto l = o.admission ? *o.admission : admission_limits(posix::fd_limit());
  if (o.shared_port) {
    l.total = std::max(l.total, o.shared_port->connections);
    l.per_source = std::max(l.per_source, o.shared_port->per_address);
  }
  return l;
}

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(asio::io_context& io, ServerOptions o)
      : io(io),
        opts(std::move(o)),
        acceptor(io),
        round(opts.round, Clock::now()),
        admission(limits(opts)),
        peer_log(opts.peer_log_interval),
        round_timer(io),
        sweep_timer(io),
        silence_timer(io),
        peer_log_timer(io) {}

  asio::io_context& io;
  ServerOptions opts;
  tcp::acceptor acceptor;                   ///< bound, until start() hands it to `accepting`
  std::shared_ptr<net::AcceptLoop> accepting;
  RoundState round;
  Admission admission;
  PeerLog peer_log;
  asio::steady_timer round_timer;
  asio::steady_timer sweep_timer;
  asio::steady_timer silence_timer;  ///< just past the earliest silence limit, when it falls between sweeps
  asio::steady_timer peer_log_timer; ///< the summary of what unauthenticated peers did
  bool peer_log_armed = false;
  std::map<NodeId, std::shared_ptr<Connection>> conns;  ///< every connection, by id: the server owns them
  std::shared_ptr<const Connection::Events> events;     ///< theirs, made by start()
  NodeId next_id = 1;
  size_t members = 0;
  ServerStats stats;
  std::optional<Clock::time_point> warned_out_of_fds;
  bool finished = false;
  bool stopped = false;
  std::function<void()> on_empty;
  std::function<void()> on_finished;

  /// Every node's stacks, being gathered for a node's `dtlaunch stacks` or a hang's report.
  struct Gathering {
    NodeId asker = 0;  ///< 0: a hang's, for opts.on_hang_stacks
    uint32_t asker_id = 0;
    std::map<NodeId, std::string> waiting;  ///< node -> its name, for the missing
    std::vector<std::string> parts;         ///< a hang's, until all are in
    std::vector<std::string> gone;          ///< asked, and gone before they answered
    size_t bytes = 0;
    std::shared_ptr<asio::steady_timer> timer;
  };
  static constexpr size_t kMaxGatherings = 16;
  static constexpr size_t kMaxHangBytes = 64 << 20;  ///< a hang's parts together; past it a node counts as missing
  std::map<uint32_t, Gathering> gatherings;
  uint32_t next_gathering = 1;
  std::optional<uint32_t> hang_round;  ///< the round whose hang was gathered

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
    net::close_on_exec(acceptor.native_handle());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(ep, ec);
    // With SO_REUSEADDR two agents that bind at once both succeed, and the one to listen second is
    // refused there: the port is taken either way (another agent of this machine hosts).
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec == asio::error::address_in_use) {
      throw PortInUse("the rendezvous port " + std::to_string(opts.port) + " is already in use on " +
                      (opts.host.empty() ? "this machine" : opts.host));
    }
    if (ec) throw std::runtime_error("cannot listen on " + opts.host + ":" + std::to_string(opts.port) + ": " + ec.message());
    if (opts.credentials.token.empty()) {
      spdlog::warn("rendezvous: no {}: any host that reaches this port can join", opts.credentials.token_name);
    }
  }

  void start() {
    // What the connections tell: handled while the server lives, ignored after.
    Connection::Events e;
    const std::weak_ptr<Impl> weak = weak_from_this();
    e.message = [weak](const std::shared_ptr<Connection>& c, const Message& m) {
      if (auto self = weak.lock(); self && !self->stopped) self->handle(c, m);
    };
    e.failed = [weak](const std::shared_ptr<Connection>& c, bool hung_up, const std::string& why) {
      if (auto self = weak.lock(); self && !self->stopped) self->drop(c, hung_up ? Ending::hung_up : Ending::dropped, why);
    };
    if (opts.shared_port) {
      e.claims = opts.shared_port->claims;
      e.claimed = [weak](const std::shared_ptr<Connection>& c) {
        if (auto self = weak.lock(); self && !self->stopped) self->hand_over(c);
      };
    }
    e.closed = [weak](const std::shared_ptr<Connection>& c) {
      if (auto self = weak.lock(); self && !self->stopped) self->forget(c);
    };
    events = std::make_shared<const Connection::Events>(std::move(e));
    // The loop calls these only until shutdown(), which stops it: `this` is alive.
    accepting = net::AcceptLoop::start(std::move(acceptor), {opts.accept_backoff},
                                       {[this](tcp::socket sock, const tcp::endpoint& peer) {
                                          ++stats.accepted;
                                          add(std::move(sock), peer);
                                        },
                                        [this](const boost::system::error_code& ec, bool paused) {
                                          ++stats.accept_failures;
                                          if (paused) out_of_descriptors(ec);
                                        }});
    sweep();
    apply(round.on_tick(Clock::now()));
  }

  void shutdown() {
    stopped = true;
    boost::system::error_code ignored;
    if (accepting) accepting->stop();
    for (auto* t : {&round_timer, &sweep_timer, &silence_timer, &peer_log_timer}) t->cancel();
    auto all = std::exchange(conns, {});
    for (auto& [id, c] : all) c->close();
    if (auto line = peer_log.summary(Clock::now())) spdlog::warn("rendezvous: {}", *line);
  }

  /// accept() found no descriptor (or memory) free: close the oldest stalled unauthenticated
  /// connection, if there is one; the loop tries again after a pause instead of spinning.
  void out_of_descriptors(const boost::system::error_code& ec) {
    const auto now = Clock::now();
    if (auto oldest = admission.oldest_stale(now)) shed(*oldest, "closed: out of file descriptors");
    if (!warned_out_of_fds || now - *warned_out_of_fds >= opts.peer_log_interval) {
      warned_out_of_fds = now;
      spdlog::warn("rendezvous: cannot accept connections: {}; trying again every {} ms", ec.message(),
                   opts.accept_backoff.count());
    }
  }

  void add(tcp::socket sock, const tcp::endpoint& remote) {
    boost::system::error_code ec;
    const NodeId id = next_id++;
    const auto now = Clock::now();
    const std::string source = source_of(remote.address());
    auto verdict = admission.arrive(id, source, now);
    if (verdict.evicted) shed(*verdict.evicted, "closed to make room: it had not finished the handshake");
    if (!verdict.admitted) {
      ++stats.shed;
      sock.close(ec);
      note_peer(Ending::shed, source,
                "shed a connection from " + remote.address().to_string() + ": too many connections have not proven the token (" +
                    std::to_string(admission.from(source)) + " from its address, " + std::to_string(admission.size()) +
                    " in all)");
      return;
    }
    sock.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Connection>(std::move(sock), id, remote, source, events);
    c->last_heard = c->last_sent = now;
    conns[id] = c;
    c->start();
  }

  /// Closes an unauthenticated connection to make room (one being refused is closed without
  /// another line: its refusal was counted).
  void shed(NodeId id, const std::string& why) {
    auto it = conns.find(id);
    if (it == conns.end()) return admission.leave(id);
    ++stats.shed;
    auto c = it->second;
    if (c->closing()) return c->close();
    drop(c, Ending::shed, why);
  }

  /// One line about a peer that has not proven the token: said now, or counted for the summary.
  void note_peer(Ending how, const std::string& source, std::string line) {
    const auto now = Clock::now();
    if (auto said = peer_log.note(how, source, std::move(line), now)) {
      if (how == Ending::refused || how == Ending::hung_up) {
        spdlog::warn("rendezvous: {}", *said);
      } else {
        spdlog::info("rendezvous: {}", *said);
      }
      return;
    }
    if (peer_log_armed) return;
    peer_log_armed = true;
    peer_log_timer.expires_at(*peer_log.due());
    peer_log_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      self->peer_log_armed = false;
      if (ec || self->stopped) return;
      if (auto line = self->peer_log.summary(Clock::now())) spdlog::warn("rendezvous: {}", *line);
    });
  }

  /// A connection closed: it leaves the map, the caps and the gatherings.
  void forget(const std::shared_ptr<Connection>& c) {
    if (!conns.erase(c->id())) return;
    admission.leave(c->id());
    forget_in_gatherings(c->id());
    if (c->member && --members == 0 && on_empty) std::exchange(on_empty, nullptr)();
  }

  /// A connection of the protocol sharing the port leaves the rendezvous, socket open.
  void hand_over(const std::shared_ptr<Connection>& c) {
    conns.erase(c->id());
    admission.leave(c->id());
    auto [socket, first] = c->hand_over();
    opts.shared_port->take(std::move(socket), c->remote(), std::move(first));
  }

  /// Stop talking to a peer: what it was in the round is lost. `how` says, for one that had not
  /// proven the token, how its connection ended.
  void drop(const std::shared_ptr<Connection>& c, Ending how, const std::string& why) {
    if (!conns.count(c->id())) return;
    const bool joined = c->joined();
    if (!c->member) {
      auto hangup = why == Connection::kHungUp ? server_hangup(opts.credentials, c->shake) : std::nullopt;
      note_peer(hangup ? Ending::hung_up : how, c->source(),
                hangup ? c->peer() + " " + *hangup : "dropped " + c->peer() + " before it joined: " + why);
    }
    c->close();
    if (joined) apply(round.on_lost(c->id(), why, Clock::now()));
  }

  /// A message of the handshake: the state machine decides, this carries out.
  void handshake(const std::shared_ptr<Connection>& c, const Message& m) {
    const bool hello = c->shake.phase == ServerHandshake::Phase::hello;
    ServerStep step = server_step(opts.credentials, c->shake, m, hello ? random_nonce() : Nonce{});
    if (step.dropped) return drop(c, Ending::dropped, *step.dropped);
    c->shake = step.next;
    for (const auto& reply : step.send) c->send(encode(reply));
    if (step.refused) {
      note_peer(Ending::refused, c->source(), "refused " + c->peer() + ": " + *step.refused);
      c->close_after_sending();
    }
    if (step.joined) {
      // Proven: from now on a member, outside the caps, and waited for at the end.
      admission.leave(c->id());
      c->member = true;
      ++members;
      apply(round.on_join(c->id(), Member{std::move(*step.joined), c->peer()}, Clock::now()));
    }
  }

  void handle(const std::shared_ptr<Connection>& c, const Message& m) {
    if (c->closing()) return;
    if (!c->joined()) return handshake(c, m);
    const auto now = Clock::now();
    if (std::holds_alternative<Heartbeat>(m)) return;
    if (auto* f = std::get_if<Failed>(&m)) return apply(round.on_failed(c->id(), f->failures, now));
    if (std::holds_alternative<Stopped>(m)) return apply(round.on_stopped(c->id(), now));
    if (std::holds_alternative<Done>(m)) return apply(round.on_done(c->id(), now));
    if (auto* l = std::get_if<Leaving>(&m)) return apply(round.on_left(c->id(), l->reason, now));
    if (auto* w = std::get_if<StacksWanted>(&m)) return gather(c, *w);
    if (auto* p = std::get_if<StacksPart>(&m)) return take_part(c, *p);
    drop(c, Ending::dropped, std::string("unexpected ") + message_name(m));
  }

  void gather(const std::shared_ptr<Connection>& c, const StacksWanted& w) {
    const bool hang = w.kind == kGatherHang;
    if (hang) {
      if (!opts.on_hang_stacks || hang_round == round.round()) return;  // one report a round
      hang_round = round.round();
    }
    if (gatherings.size() >= kMaxGatherings) {
      if (!hang) c->send(encode(StacksEnd{w.id, "every node: " + std::to_string(kMaxGatherings) + " gatherings at once"}));
      return;
    }
    const uint32_t id = next_gathering++;
    Gathering& g = gatherings[id];
    g.asker = hang ? 0 : c->id();
    g.asker_id = w.id;
    for (const auto& [node, conn] : conns) {
      if (!conn->joined()) continue;
      g.waiting.emplace(node, round.name(node));
      conn->send(encode(StacksAsk{id, w.kind}));
    }
    const auto limit = w.kind == kGatherRanks ? opts.ranks_timeout : opts.stacks_timeout;
    g.timer = std::make_shared<asio::steady_timer>(io, limit);
    g.timer->async_wait([self = shared_from_this(), id](const boost::system::error_code& ec) {
      if (!ec && !self->stopped) self->finish_gathering(id);
    });
    if (g.waiting.empty()) finish_gathering(id);
  }

  void take_part(const std::shared_ptr<Connection>& c, const StacksPart& p) {
    auto it = gatherings.find(p.id);
    if (it == gatherings.end() || !it->second.waiting.count(c->id())) return;  // late, or not asked: dropped
    Gathering& g = it->second;
    if (g.asker == 0) {
      if (g.bytes + p.part.size() > kMaxHangBytes) return;  // stays waiting: named as missing
      g.bytes += p.part.size();
      g.parts.push_back(p.part);
    } else if (auto asker = conns.find(g.asker); asker != conns.end()) {
      asker->second->send(encode(StacksPart{g.asker_id, p.part}));
    }
    g.waiting.erase(c->id());
    if (g.waiting.empty()) finish_gathering(p.id);
  }

  void finish_gathering(uint32_t id) {
    auto it = gatherings.find(id);
    if (it == gatherings.end()) return;
    Gathering g = std::move(it->second);
    gatherings.erase(it);
    if (g.timer) g.timer->cancel();
    std::string missing;
    for (const auto& name : g.gone) missing += (missing.empty() ? "" : ", ") + name;
    for (const auto& [node, name] : g.waiting) missing += (missing.empty() ? "" : ", ") + name;
    if (g.asker == 0) {
      opts.on_hang_stacks(std::move(g.parts), missing);
    } else if (auto asker = conns.find(g.asker); asker != conns.end()) {
      asker->second->send(encode(StacksEnd{g.asker_id, missing}));
    }
  }

  /// A connection went: gatherings it asked for go too; the others name it as missing and stop
  /// waiting for it (finished from the event loop, not inside the close).
  void forget_in_gatherings(NodeId node) {
    for (auto it = gatherings.begin(); it != gatherings.end();) {
      Gathering& g = it->second;
      if (g.asker == node) {
        if (g.timer) g.timer->cancel();
        it = gatherings.erase(it);
        continue;
      }
      if (auto w = g.waiting.find(node); w != g.waiting.end()) {
        g.gone.push_back(w->second + " (gone)");
        g.waiting.erase(w);
        if (g.waiting.empty()) {
          asio::post(io, [self = shared_from_this(), id = it->first] {
            if (!self->stopped) self->finish_gathering(id);
          });
        }
      }
      ++it;
    }
  }


  void apply(RoundState::Actions a) {
    // A member's host name and address are its own text: printed harmless too.
    for (const auto& line : a.log) spdlog::info("rendezvous: {}", printable(line, kMaxLogLine));
    if (opts.on_round && std::any_of(a.send.begin(), a.send.end(),
                                     [](const auto& s) { return std::holds_alternative<Round>(s.second); })) {
      opts.on_round();
    }
    for (auto& [id, msg] : a.send) {
      auto it = conns.find(id);
      if (it != conns.end()) it->second->send(encode(msg));
    }
    for (NodeId id : a.drop) {
      auto it = conns.find(id);
      if (it != conns.end()) it->second->close_after_sending();
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

  /// Once per heartbeat interval: heartbeats to idle peers; the quiet, slow or flooding dropped,
  /// and those that did not prove the token by the deadline.
  void sweep() {
    const auto due = Clock::now() + opts.liveness.interval;
    sweep_timer.expires_at(due);
    sweep_timer.async_wait([self = shared_from_this(), due](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      const auto now = Clock::now();
      self->forgive_if_paused(due, now);
      const auto deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(self->admission.limits().deadline);
      for (NodeId id : self->admission.expired(now)) {
        auto it = self->conns.find(id);
        if (it == self->conns.end()) {
          self->admission.leave(id);
        } else if (it->second->closing()) {
          it->second->close();  // its refusal could not be written in all that time
        } else if (self->opts.shared_port && it->second->silent() && self->opts.shared_port->has_client &&
                   self->opts.shared_port->has_client(it->second->remote().address())) {
          // No rendezvous peer keeps quiet, and a store client from the same address opens a second
          // connection it says nothing on (torch 1.13's, for its watched keys; closed, its worker
          // spins on the socket). The store keeps it, within its caps; any other silent one goes.
          it->second->hand_over_once_read_ends();
        } else {
          self->drop(it->second, Ending::timed_out, "no handshake within " + std::to_string(deadline_ms.count()) + " ms");
        }
      }
      std::vector<std::pair<std::shared_ptr<Connection>, std::string>> doomed;
      for (auto& [id, c] : self->conns) {
        if (c->closing()) continue;
        if (auto quiet = self->silence(*c, now)) {
          doomed.emplace_back(c, *quiet);
        } else if (c->frames > self->opts.max_frames_per_interval) {
          doomed.emplace_back(c, "flooding: " + std::to_string(c->frames) + " frames in one heartbeat interval");
        } else if (c->joined() && now - c->last_sent >= self->opts.liveness.interval) {
          c->send(encode(Heartbeat{}));
        }
        c->frames = 0;
      }
      for (auto& [c, why] : doomed) self->drop(c, Ending::dropped, why);
      self->sweep();
      self->watch_silence(now);
    });
  }

  /// A timer due at `due` that fires an interval or more late: this process did not run (SIGSTOP, a
  /// suspended VM), so it heard no one. Every peer's silence starts again rather than count as theirs.
  void forgive_if_paused(Clock::time_point due, Clock::time_point now) {
    if (now - due < opts.liveness.interval) return;
    for (auto& [id, c] : conns) c->last_heard = std::max(c->last_heard, now);
  }

  /// Why a joined peer counts as lost for its silence, if it does.
  std::optional<std::string> silence(const Connection& c, Clock::time_point now) const {
    if (!c.joined() || now - c.last_heard <= opts.liveness.silence_limit()) return std::nullopt;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c.last_heard).count();
    return "nothing heard for " + std::to_string(ms) + " ms (no heartbeat)";
  }

  /// The sweep notices a quiet node up to one interval late: when a joined node's silence limit
  /// falls before the next sweep, look again just past it (rarely: only once a node has been quiet
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
    silence_timer.async_wait([self = shared_from_this(), at](const boost::system::error_code& ec) {
      if (ec || self->stopped) return;
      const auto now = Clock::now();
      self->forgive_if_paused(at, now);
      std::vector<std::pair<std::shared_ptr<Connection>, std::string>> doomed;
      for (auto& [id, c] : self->conns) {
        if (auto quiet = self->silence(*c, now)) doomed.emplace_back(c, *quiet);
      }
      for (auto& [c, why] : doomed) self->drop(c, Ending::dropped, why);
      self->watch_silence(now);
    });
  }
};

Server::Server(asio::io_context& io, ServerOptions options) : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->bind();
  impl_->start();
}
Server::~Server() { impl_->shutdown(); }
int Server::port() const { return impl_->accepting->port(); }
size_t Server::connections() const { return impl_->members; }
ServerStats Server::stats() const {
  ServerStats s = impl_->stats;
  s.members = impl_->members;
  s.unauthenticated = impl_->conns.size() - impl_->members;
  return s;
}
bool Server::finished() const { return impl_->finished; }
int Server::exit_code() const { return impl_->round.exit_code(); }
void Server::end_job(const std::string& reason) { impl_->apply(impl_->round.on_shutdown(reason)); }

void Server::announce(const HangVerdict& verdict) {
  const Bytes frame = encode(verdict);
  for (const auto& [node, conn] : impl_->conns) {
    if (conn->joined()) conn->send(frame);
  }
}
void Server::when_finished(std::function<void()> done) {
  if (impl_->finished) return done();
  impl_->on_finished = std::move(done);
}
void Server::when_empty(std::function<void()> done) {
  if (impl_->members == 0) return done();
  impl_->on_empty = std::move(done);
}

}  // namespace dtl::rendezvous
