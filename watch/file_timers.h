// torchrun's expiration timers, served as its FileTimerServer does: with
// TORCHELASTIC_ENABLE_FILE_TIMER=1 in dtlaunch's environment, the workers get
// TORCHELASTIC_TIMER_FILE (the variable's own path when set, else one in the run's folder), a FIFO
// where torch.distributed.elastic.timer.FileTimerClient writes one JSON request a line:
// {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}; a negative
// expiration_time releases the timer. Once a timer expires its worker gets the signal (the
// earliest expired timer's that has one), and its failure names the timer. Unlike torch's server,
// dtlaunch signals only its own workers (a pid in a worker's session), and does not kill itself.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dtl::watch {

struct TimerRequest {
  pid_t pid = 0;
  std::string scope;
  double expiration_time = 0;  ///< seconds since the epoch; negative: release
  int signal = 0;
};
/// One line of the FIFO; nullopt when it is not a request.
std::optional<TimerRequest> parse_timer_request(const std::string& line);

/// The timers as torch's FileTimerServer keeps them: one per (pid, scope).
class TimerTable {
 public:
  struct Expired {
    pid_t pid = 0;
    int signal = 0;  ///< 0: none of its expired timers has one, so it is not signalled
    std::vector<std::string> scopes;
  };
  void on_request(const TimerRequest& r);
  /// The pids with timers expired at `now` (seconds since the epoch), earliest first within each;
  /// their timers are cleared.
  std::vector<Expired> expire(double now);
  void forget(pid_t pid);
  bool empty() const { return timers_.empty(); }

 private:
  std::map<std::pair<pid_t, std::string>, TimerRequest> timers_;
};

/// The warnings about lines of the FIFO that are no request (a worker writes what it likes there):
/// the first kInFull in full, made printable, then a count, said at most once per `interval`.
class BadLineLog {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kInFull = 3;
  explicit BadLineLog(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  /// A line that is no request came at `now`: the warning to say now, if any (else it is counted).
  std::optional<std::string> note(const std::string& line, Clock::time_point now);
  /// When the count is to be said; none while nothing is counted.
  std::optional<Clock::time_point> due() const { return due_; }
  /// One line for the lines counted since the last ("expiration timers: 1997 more lines ..."); none
  /// when nothing was counted. Call it when due, and at the end whatever the time.
  std::optional<std::string> summary();

 private:
  Clock::duration interval_;
  size_t said_ = 0;
  size_t counted_ = 0;
  std::optional<Clock::time_point> due_;
};

class FileTimerServer {
 public:
  /// `fire(pid, signal, scopes)` signals the worker when it is one; returns whether it did. The
  /// scopes, a worker's text, come printable.
  FileTimerServer(boost::asio::io_context& io, std::string path,
                  std::function<bool(pid_t, int, const std::vector<std::string>&)> fire);
  ~FileTimerServer();
  const std::string& path() const { return path_; }

 private:
  void read();
  void arm();
  void not_a_request(const std::string& line);

  boost::asio::posix::stream_descriptor fifo_;
  boost::asio::steady_timer tick_;
  boost::asio::steady_timer bad_lines_due_;
  BadLineLog bad_lines_;
  std::string path_;
  std::function<bool(pid_t, int, const std::vector<std::string>&)> fire_;
  TimerTable table_;
  std::string pending_;
  std::array<char, 4096> buf_{};
  bool armed_ = false;
};

}  // namespace dtl::watch
