// Where `dtlaunch stacks` finds the running jobs of its user on this machine: each supervisor (or
// node agent, or fan-out) listens on a Unix socket `<pid>.sock` in a folder only that user may enter
// ($XDG_RUNTIME_DIR/dtlaunch, else /tmp/dtlaunch-<uid>; where another user, or anything but a
// folder of this user's alone, took that name first, a private `<that name>.XXXXXX` beside it), and
// answers a connection from the same user (or root) with every rank's stack now, or, when the
// connection says `ranks` first, with every rank's figures (`dtlaunch top`). The file goes with the
// job. The asking side is watch/job_ask.h.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "base/accept_loop.h"

namespace dtl::watch {

/// The folder's name: $XDG_RUNTIME_DIR/dtlaunch, else /tmp/dtlaunch-<uid>.
std::string stacks_dir();
/// Why `dir` is not a folder of this user's alone ("is a symbolic link", "belongs to uid 1001",
/// "is a regular file", "is open to other users (mode 0777)"); "" when it is one. Never follows a link.
std::string unfit_folder(const std::string& dir);
/// The private folders jobs made beside stacks_dir() because it was unfit: `<stacks_dir>.XXXXXX`,
/// each this user's alone.
std::vector<std::string> fallback_dirs();

struct LiveJob {
  pid_t pid = 0;
  std::string socket;
};
/// The jobs of this user whose socket is in the folders and whose dtlaunch listens on it (its
/// credentials, read on a connection, are this user's and the pid the socket is named for). A
/// socket nobody listens on is a SIGKILLed dtlaunch's, whatever process has its pid now: removed.
std::vector<LiveJob> live_jobs();

/// This dtlaunch's side: listens on `<folder>/<pid>.sock`; a connection of this user or root asks
/// by its first line: `ranks` for the figures (answer_ranks), anything else, or nothing within
/// kAskWait, for the stacks, which go to `ask` one ask at a time: clients that ask while one is under
/// way get its answer. At most kMaxClients connections are held (more are told so and closed), a
/// client gone before it asked or before the answer costs no read (`wanted`), and accepting pauses
/// while the process is out of descriptors. The file, and a folder it made, go with the object.
class StacksSocket {
 public:
  using Reply = std::function<void(std::string)>;
  struct Ask {
    Reply reply;                   ///< once, with the text for every client waiting
    std::function<bool()> wanted;  ///< false once every client waiting has gone
  };
  static constexpr size_t kMaxClients = 32;
  /// A client that says nothing this long asks for the stacks.
  static constexpr std::chrono::seconds kAskWait{2};

  StacksSocket(boost::asio::io_context& io, std::function<void(Ask)> ask);
  ~StacksSocket();
  StacksSocket(const StacksSocket&) = delete;
  StacksSocket& operator=(const StacksSocket&) = delete;
  const std::string& path() const { return path_; }  ///< "" when there is no socket
  /// A connection whose first line is `ranks` goes to `ranks`, once for it alone, and starts no
  /// stack reading (unset: it is told there is nothing to show).
  void answer_ranks(std::function<void(Reply)> ranks) { ranks_ = std::move(ranks); }

 private:
  struct Client;
  void accepted(boost::asio::local::stream_protocol::socket socket);
  /// Reads what the client says: its first line is its ask, the rest is dropped, and its end
  /// before its answer is the end of its ask.
  void watch(const std::shared_ptr<Client>& client);
  /// At `at` the client asks for the stacks when it has not asked yet, else it is dropped.
  void expire(const std::shared_ptr<Client>& client, std::chrono::steady_clock::time_point at);
  /// The client's ask, from its first line ("" when it said none in time).
  void asked(const std::shared_ptr<Client>& client, std::string_view line);
  /// Every client asking for the stacks gets `text`.
  void answer(std::string text);
  void send(const std::shared_ptr<Client>& client, std::string text);
  void drop(const std::shared_ptr<Client>& client);

  boost::asio::io_context& io_;
  std::function<void(Ask)> ask_;
  std::function<void(Reply)> ranks_;
  std::shared_ptr<net::LocalAcceptLoop> loop_;
  std::list<std::shared_ptr<Client>> clients_;
  bool asking_ = false;                   ///< an ask is under way: new clients wait for its answer
  bool said_out_of_descriptors_ = false;  ///< once until a connection is taken again
  std::shared_ptr<bool> alive_;           ///< handlers queued past the object's end do nothing
  std::array<char, 16384> scratch_{};     ///< what a client sends is read and dropped
  std::string path_;                      ///< "" when there is no socket
  std::string own_dir_;                   ///< the private folder made in place of an unfit one
};

/// Connects to a job's socket as `dtlaunch stacks` and `top` do (-1, errno set, when it cannot),
/// waiting at most 5 s for a place in the job's backlog.
int connect_to_job(const std::string& socket);

}  // namespace dtl::watch
