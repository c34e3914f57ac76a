// dtlaunch's own stdout and stderr, each written by a thread of its own. A console that stops reading
// (a paused `less`, a terminal on Ctrl-S, a full pipe nobody drains) then blocks that thread, not
// the event loop: signals, worker exits and the rendezvous are still handled. Worker output waits
// in a bounded queue; past the bound the worker group stops reading the workers' pipes, so the
// workers block on their own writes, as they would writing to that console directly.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace spdlog::sinks {
class sink;
}

namespace dtl::launcher {

class Console {
 public:
  /// Past `backlog_limit` queued bytes the console counts as backed up.
  explicit Console(size_t backlog_limit = size_t{1} << 20);
  /// Writes out everything queued (waiting as long as the reader takes), then stops the thread.
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  /// Queues `text` for fd 1 or 2, after everything queued there before; never blocks.
  void write(int fd, std::string_view text);
  /// More than the limit waits on stdout or stderr: readers of worker output should pause.
  bool backed_up() const;
  /// Runs `resume` on `io` once the backlog has fallen to half the limit (at once if it has).
  /// `forget(io)` drops callbacks not yet posted, for owners that go away first.
  void when_drained(boost::asio::io_context& io, std::function<void()> resume);
  void forget(boost::asio::io_context& io);
  /// An spdlog sink writing to fd 2 through stderr's queue, so dtlaunch's messages stay in order
  /// with the workers' stderr lines. The sink must not outlive the console.
  std::shared_ptr<spdlog::sinks::sink> sink();

 private:
  /// One output (stdout or stderr) and the thread that writes it: a stalled stdout does not hold
  /// up dtlaunch's messages on stderr.
  struct Channel {
    int fd = -1;
    std::string queued;          ///< waiting to be written, in order
    size_t pending = 0;          ///< bytes queued or being written
    bool alive = true;           ///< false once the reader is gone
    std::condition_variable wake;
    std::thread thread;
  };
  struct Waiter {
    boost::asio::io_context* io;
    std::function<void()> resume;
  };
  void run(Channel& c);
  bool over(size_t limit) const;  ///< with mutex_ held

  const size_t limit_;
  mutable std::mutex mutex_;
  bool stop_ = false;
  Channel channels_[2];  ///< stdout, stderr
  std::vector<Waiter> waiters_;
};

}  // namespace dtl::launcher
