// Where `dtlaunch stacks` finds the running jobs of its user on this machine: each supervisor (or
// node agent) listens on a Unix socket `<pid>.sock` in a folder only that user may enter
// ($XDG_RUNTIME_DIR/dtlaunch, else /tmp/dtlaunch-<uid>), and answers a connection from the same
// user (or root) with every rank's stack now, or, when the connection says `ranks` first, with every
// rank's figures (`dtlaunch top`). The file goes with the job.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

namespace dtl::watch {

/// The folder, made (mode 0700) when `create`; "" when it cannot be made or is not this user's alone.
std::string stacks_dir(bool create);

struct LiveJob {
  pid_t pid = 0;
  std::string socket;
};
/// The jobs whose socket is in the folder and whose dtlaunch still runs; stale sockets are removed.
std::vector<LiveJob> live_jobs();

/// This dtlaunch's side: listens on `<stacks_dir>/<pid>.sock` (none when the folder cannot be made)
/// and hands each connection of this user or root to `ask` with a way to reply (once). The file
/// goes with the object.
class StacksSocket {
 public:
  using Reply = std::function<void(std::string)>;
  StacksSocket(boost::asio::io_context& io, std::function<void(Reply)> ask);
  ~StacksSocket();
  StacksSocket(const StacksSocket&) = delete;
  StacksSocket& operator=(const StacksSocket&) = delete;
  /// A connection whose first line is `ranks` goes to `ranks` instead (unset: it is told there is
  /// nothing to show). Any other line, none, or nothing within 2 s asks for the stacks.
  void answer_ranks(std::function<void(Reply)> ranks);

 private:
  void accept();
  /// Reads the connection's ask, then hands it to ask_ or ranks_.
  void read_ask(const std::shared_ptr<boost::asio::local::stream_protocol::socket>& peer, Reply reply);
  std::function<void(Reply)> ranks_;
  std::shared_ptr<bool> alive_ =
      std::make_shared<bool>(true);  ///< false once this is gone: asks still read are dropped
  boost::asio::io_context& io_;
  std::function<void(Reply)> ask_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;  ///< "" when there is no socket
};

/// `dtlaunch stacks [PID]`: connects to the job's socket and prints what it answers on stdout.
/// Returns the exit code: 0, 1 when no job of this user runs here (or it did not answer), 2 when
/// several do and none was named.
int print_stacks(const std::optional<pid_t>& pid);

}  // namespace dtl::watch
