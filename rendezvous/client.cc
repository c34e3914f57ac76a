#include "rendezvous/client.h"

#include <fcntl.h>

#include <algorithm>
#include <deque>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/auth.h"
#include "rendezvous/round_state.h"

namespace dtl::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  Impl(asio::io_context& io, ClientOptions o, Callbacks cb)
      : io(io), opts(std::move(o)), cb(std::move(cb)), sock(io), retry_timer(io), heartbeat_timer(io) {}

  asio::io_context& io;
  ClientOptions opts;
  Callbacks cb;
  tcp::socket sock;
  asio::steady_timer retry_timer;
  asio::steady_timer heartbeat_timer;
  FrameDecoder decoder;
  std::array<uint8_t, 4096> buf;
  std::deque<Bytes> out;
  bool writing = false;
  bool connected = false;
  ClientHandshake shake;
  bool over = false;  ///< Exit, refusal or error: nothing more is expected
  bool leaving = false;  ///< over, and a last frame goes out before the hang-up
  std::function<void()> on_last_word;  ///< after_last_word's: runs once the leaving connection closes
  Clock::time_point deadline, last_heard, last_sent;
  std::string last_connect_error;
  int sheds = 0;  ///< connections the server closed before answering
  unsigned generation = 0;  ///< which connection handlers belong to

  void start() {
    deadline = Clock::now() + opts.connect_timeout;
    connect();
  }

  void connect() {
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(opts.host, std::to_string(opts.port), ec);
    // a name that does not resolve is bad input, like a refusal: exit 2
    if (ec) return fail("cannot resolve the rendezvous endpoint '" + opts.host + "': " + ec.message(), true);
    sock = tcp::socket(io);
    asio::async_connect(sock, endpoints, [self = shared_from_this()](const boost::system::error_code& ec,
                                                                    const tcp::endpoint&) {
      if (self->over) return;
      if (ec) {
        self->last_connect_error = ec.message();
        if (Clock::now() >= self->deadline) {
          return self->fail("cannot reach the rendezvous at " + self->opts.host + ":" + std::to_string(self->opts.port) +
                                ": " + ec.message(),
                            false);
        }
        self->retry_timer.expires_after(self->opts.retry_interval);
        self->retry_timer.async_wait([self](const boost::system::error_code& e) {
          if (!e && !self->over) self->connect();
        });
        return;
      }
      self->on_connected();
    });
  }

  void on_connected() {
    // Asio opens sockets without close-on-exec: the workers would hold the rendezvous connection.
    // (Workers start only after a round, so none was forked while it connected.)
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    boost::system::error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    connected = true;
    last_heard = last_sent = Clock::now();
    carry_out(client_start(opts.credentials, random_nonce()));
    read();
    heartbeat();
  }

  void read() {
    sock.async_read_some(asio::buffer(buf), [self = shared_from_this(), gen = generation](
                                                const boost::system::error_code& ec, size_t n) {
      if (gen != self->generation) return;
      if (self->leaving) return ec ? self->cancel() : self->read();  // drained up to the server's hang-up
      if (self->over) return;
      if (ec && self->shed()) return;
      if (ec) {
        return self->fail(ec == asio::error::eof ? "the rendezvous server closed the connection"
                                                 : "lost the rendezvous server: " + ec.message(),
                          false);
      }
      self->last_heard = Clock::now();
      std::vector<Message> msgs;
      auto err = self->decoder.feed(self->buf.data(), n, msgs);
      for (auto& m : msgs) {
        if (self->over) return;
        self->handle(m);
      }
      if (err) return self->fail("bad frame from the rendezvous server: " + err->what, false);
      if (!self->over) self->read();
    });
  }

  /// The server closed the connection before answering the hello: it sheds connections that have
  /// not proven the token when too many are open (an attack, or a burst of nodes on one address).
  /// Connect again, more slowly each time, until the connect deadline. True when it will.
  bool shed() {
    if (shake.phase != ClientHandshake::Phase::hello_sent || Clock::now() >= deadline) return false;
    boost::system::error_code ignored;
    heartbeat_timer.cancel();
    sock.close(ignored);
    connected = writing = false;
    out.clear();
    decoder = FrameDecoder{};
    ++generation;
    const auto pause = std::min(opts.retry_interval * (1 << std::min(sheds, 4)), std::chrono::milliseconds(1000));
    ++sheds;
    retry_timer.expires_after(pause);
    retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
      if (!e && !self->over) self->connect();
    });
    return true;
  }

  /// What the handshake decided: its messages go out, its verdict ends the connection.
  void carry_out(const ClientStep& step) {
    const bool joining = step.next.phase != shake.phase;
    shake = step.next;
    if (step.refused) return fail(*step.refused, true);
    if (step.failed) return fail(*step.failed, false);
    for (const auto& m : step.send) send(m);
    if (joining && shake.phase == ClientHandshake::Phase::joined) heartbeat();  // heartbeats start now
  }

  void handle(const Message& m) {
    ClientStep step = client_step(opts.credentials, shake, m, opts.join);
    if (!step.forward) return carry_out(step);
    if (auto* r = std::get_if<Round>(&m)) return cb.on_round(*r);
    if (auto* s = std::get_if<Stop>(&m)) return cb.on_stop(*s);
    if (auto* a = std::get_if<StacksAsk>(&m)) return cb.on_stacks_ask ? cb.on_stacks_ask(*a) : void();
    if (auto* p = std::get_if<StacksPart>(&m)) return cb.on_stacks_part ? cb.on_stacks_part(*p) : void();
    if (auto* e = std::get_if<StacksEnd>(&m)) return cb.on_stacks_end ? cb.on_stacks_end(*e) : void();
    if (auto* v = std::get_if<HangVerdict>(&m)) return cb.on_hang_verdict ? cb.on_hang_verdict(*v) : void();
    if (auto* e = std::get_if<Exit>(&m)) {
      over = true;
      cancel();
      return cb.on_exit(*e);
    }
  }

  void send(const Message& m) {
    if (!connected || over) return;
    out.push_back(encode(m));
    last_sent = Clock::now();
    if (!writing) write();
  }

  void write() {
    if (out.empty()) {
      writing = false;
      return;
    }
    writing = true;
    asio::async_write(sock, asio::buffer(out.front()), [self = shared_from_this(), gen = generation](
                                                           const boost::system::error_code& ec, size_t) {
      if (gen != self->generation || (self->over && !self->leaving)) return;  // given up, or closed
      if (ec && self->leaving) return self->cancel();
      if (ec) return self->fail("lost the rendezvous server: " + ec.message(), false);
      self->out.pop_front();
      if (self->leaving && self->out.empty()) return self->hang_up();
      self->write();
    });
  }

  void heartbeat() {
    // Wake when the next heartbeat is due, or just past the silence limit if that comes first: a
    // fixed tick would notice a lost server up to one interval late. No heartbeat before the Join:
    // a server still answering the Hello expects the Join next, and drops a peer that sends else.
    const bool joined = shake.phase == ClientHandshake::Phase::joined;
    Clock::time_point wake = last_heard + opts.liveness.silence_limit() + std::chrono::milliseconds(1);
    if (joined) wake = std::min(wake, last_sent + opts.liveness.interval);
    heartbeat_timer.expires_at(wake);
    heartbeat_timer.async_wait([self = shared_from_this(), wake](const boost::system::error_code& ec) {
      if (ec || self->over) return;
      auto now = Clock::now();
      // Woken an interval or more late, this process did not run (SIGSTOP, a suspended VM): the
      // server's silence is this node's own, so it starts again (its heartbeats are read next).
      if (now - wake >= self->opts.liveness.interval) self->last_heard = std::max(self->last_heard, now);
      auto quiet = now - self->last_heard;
      if (quiet > self->opts.liveness.silence_limit()) {
        return self->fail("lost the rendezvous server: nothing heard for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count()) +
                              " ms",
                          false);
      }
      const bool joined = self->shake.phase == ClientHandshake::Phase::joined;
      if (joined && now - self->last_sent >= self->opts.liveness.interval) self->send(Heartbeat{});
      self->heartbeat();
    });
  }

  /// Ends a joined connection with `last` (which the server answers by hanging up): nothing more is
  /// delivered. Anything else just closes.
  void leave(const Message& last) {
    if (over) return;
    const bool joined = connected && shake.phase == ClientHandshake::Phase::joined;
    over = true;
    if (!joined) return cancel();
    leaving = true;
    retry_timer.cancel();
    heartbeat_timer.cancel();
    out.push_back(encode(last));
    if (!writing) write();
  }

  /// The last frame is out: no more from this side. The read loop drains what the server still sends
  /// and closes at its hang-up (closing with its heartbeats unread would reset the connection, which
  /// can lose the last frame on the server's side), or the socket closes with the client.
  void hang_up() {
    boost::system::error_code ignored;
    sock.shutdown(tcp::socket::shutdown_send, ignored);
  }

  void after_last_word(std::function<void()> done) {
    if (!leaving || !sock.is_open()) return done();  // (only cancel() closes a leaving connection)
    on_last_word = std::move(done);
  }

  void cancel() {
    if (on_last_word) asio::post(io, std::exchange(on_last_word, nullptr));
    boost::system::error_code ignored;
    retry_timer.cancel();
    heartbeat_timer.cancel();
    sock.close(ignored);
  }

  void fail(const std::string& why, bool refused) {
    if (over) return;
    over = true;
    cancel();
    cb.on_error(why, refused);
  }
};

Client::Client(asio::io_context& io, ClientOptions options, Callbacks callbacks)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(callbacks))) {}
Client::~Client() {
  impl_->on_last_word = nullptr;
  impl_->over = true;
  impl_->cancel();
}
void Client::start() { impl_->start(); }
void Client::send(const Message& m) { impl_->send(m); }
std::string Client::local_address() const {
  boost::system::error_code ec;
  auto endpoint = impl_->sock.local_endpoint(ec);
  if (ec) return "";
  auto address = endpoint.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) return address.to_v6().to_v4().to_string();
  return address.to_string();
}

void Client::close() {
  impl_->over = true;
  impl_->cancel();
}
void Client::leave(const Message& last) { impl_->leave(last); }
void Client::after_last_word(std::function<void()> done) { impl_->after_last_word(std::move(done)); }

}  // namespace dtl::rendezvous
