// One peer of the rendezvous server: its socket, the frames it sends (decoded as they come), the
// frames queued for it, and how it ends. It reads, writes and closes; what a message means, who
// may stay and when a peer is lost are the server's (rendezvous/server.cc), which owns every
// connection and hears of each through Events.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/handshake.h"
#include "rendezvous/protocol.h"
#include "rendezvous/round_state.h"

namespace dtl::rendezvous {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  static constexpr const char* kHungUp = "connection closed";  ///< failed()'s `why` when the peer hung up

  struct Events {
    /// A message arrived. The handler may close the connection; no later message is delivered then.
    std::function<void(const std::shared_ptr<Connection>&, const Message&)> message;
    /// The peer hung up (`hung_up`), or its frame was bad or a write failed: `why`, one line.
    std::function<void(const std::shared_ptr<Connection>&, bool hung_up, const std::string& why)> failed;
    /// With a shared port: whether the first bytes are the other protocol's (nullopt: it needs more).
    std::function<std::optional<bool>(const uint8_t* data, size_t size)> claims;
    /// They are: the connection is the other protocol's now (take the socket with hand_over()).
    std::function<void(const std::shared_ptr<Connection>&)> claimed;
    /// The socket is closed: once, whatever closed it.
    std::function<void(const std::shared_ptr<Connection>&)> closed;
  };

  /// `events` are shared by the server's connections; they outlive every handler of this one.
  Connection(boost::asio::ip::tcp::socket socket, NodeId id, boost::asio::ip::tcp::endpoint remote, std::string source,
             std::shared_ptr<const Events> events);

  /// Starts reading; until close(), each frame's messages go to events.message.
  void start();
  /// Queues a frame; writes go out one at a time, in order.
  void send(Bytes frame);
  /// Reads nothing more; the socket closes once what is queued is written (at once if nothing is).
  void close_after_sending();
  /// Closes the socket now, dropping what is queued.
  void close();
  /// The socket and the bytes read so far, for the protocol that claimed it; the connection is over.
  std::pair<boost::asio::ip::tcp::socket, Bytes> hand_over();
  /// With a shared port: the connection goes to the other protocol (events.claimed) once its pending
  /// read ends, which this cancels; whatever that read got goes along. For a peer that never spoke.
  void hand_over_once_read_ends();
  /// With a shared port: nothing has been read from it yet.
  bool silent() const { return first_ && first_->empty(); }

  NodeId id() const { return id_; }
  const boost::asio::ip::tcp::endpoint& remote() const { return remote_; }
  std::string peer() const { return remote_.address().to_string(); }  ///< for the log
  const std::string& source() const { return source_; }               ///< what the caps count it under
  bool closing() const { return closing_; }                           ///< nothing more is read
  bool writing() const { return writing_; }
  bool joined() const { return !closing_ && shake.phase == ServerHandshake::Phase::joined; }

  ServerHandshake shake;
  bool member = false;  ///< proved the token (or there is none) and joined: never counted against the caps
  Clock::time_point last_heard, last_sent;
  int frames = 0;  ///< in this heartbeat interval

 private:
  void read();
  void write();
  void delivered(const uint8_t* data, size_t size);

  boost::asio::ip::tcp::socket socket_;
  const NodeId id_;
  const boost::asio::ip::tcp::endpoint remote_;
  const std::string source_;
  std::shared_ptr<const Events> events_;
  FrameDecoder decoder_;
  std::array<uint8_t, 2048> buf_;  ///< reads are small (joins are ~200 bytes): thousands of nodes stay cheap
  std::optional<Bytes> first_;     ///< with a shared port: the bytes read until they say whose they are
  bool handing_over_ = false;      ///< hand_over_once_read_ends was called
  std::deque<Bytes> out_;
  bool writing_ = false;
  bool closing_ = false;
  bool closed_ = false;
};

}  // namespace dtl::rendezvous
