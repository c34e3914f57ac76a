// The fan-out's rules as a pure state machine, as AgentState is the elastic agent's: events (a
// host's hello, its error output, its ssh's exit, its output's end, a signal, a timer) go in; what
// to do with the hosts' ssh processes, their stdin, the console and the timers comes out, in
// order. No pipes, processes or clocks: run_fanout (fanout/fanout.h) feeds it.
//
// The rules:
//   - preflight: every host says hello with this dtlaunch's version within kPreflightTimeout, or
//     nothing starts and dtlaunch exits 2 naming the first host at fault (its ssh's last word);
//   - then every host is sent its variables, the master address from the first host's hello;
//   - a host's agent that ends with a failure, SIGINT, SIGTERM or SIGHUP here, stop every host:
//     their stdin is closed, and ssh is sent SIGTERM after stop_timeout + 10 s, SIGKILL 5 s later;
//     a second signal sends SIGTERM at once;
//   - SIGUSR1 and SIGUSR2 are passed on to every host's workers;
//   - once every ssh has ended, what is left of its process group is killed, and its output is read
//     for at most kDrainTimeout: a child that keeps the pipes open cannot hold the job;
//   - the exit code: 128 + a signal received; else the first failure seen before stopping; else the
//     first host's non-zero code; else 0.
#pragma once

#include <signal.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"
#include "fanout/fanout_wire.h"

namespace dtl::fanout {

namespace action {
enum class Timer { preflight, kill, drain };
inline constexpr std::chrono::milliseconds kPreflightTimeout{30000};  ///< ssh's ConnectTimeout is 10 s
inline constexpr std::chrono::milliseconds kDrainTimeout{2000};

struct Send {  ///< write `bytes` to the host's stdin
  size_t host;
  std::string bytes;
};
struct CloseInput {  ///< close the host's stdin: its agent stops its workers and leaves
  size_t host;
};
struct Kill {  ///< `signal` to the host's ssh and its process group
  size_t host;
  int signal;
};
struct Arm {  ///< on_timer(timer) after `after`, replacing that timer's earlier arming
  Timer timer;
  std::chrono::milliseconds after;
};
struct Cancel {
  Timer timer;
};
struct Write {  ///< whole lines to the console's fd 1 or 2
  int fd;
  std::string text;
};
struct Info {  ///< a line for dtlaunch's log
  std::string text;
};
struct Finish {  ///< stop reading the hosts: the run is over, with this exit code
  int exit_code;
};
using Action = std::variant<Send, CloseInput, Kill, Arm, Cancel, Write, Info, Finish>;
}  // namespace action

class FanoutState {
 public:
  using Actions = std::vector<action::Action>;

  struct Host {
    std::string name;     ///< as the user wrote it
    Variables variables;  ///< the wire's step 2, PET_MASTER_ADDR as planned
  };
  /// `version`: what every hello must say (this dtlaunch's).
  FanoutState(std::vector<Host> hosts, bool master_from_first_host, double stop_timeout_s, std::string version);

  Actions start();
  /// The host's first line of output.
  Actions on_hello(size_t host, std::string_view line);
  /// What the host's ssh printed on stderr: its last line is what a preflight failure reports.
  void on_error_output(size_t host, std::string_view chunk);
  /// Whether the hosts' stderr goes to the console yet.
  bool shows_errors() const { return started_; }
  /// The host's ssh ended with waitpid's `status`.
  Actions on_exit(size_t host, int status);
  /// The host's stdout and stderr both ended.
  Actions on_output_closed(size_t host);
  /// dtlaunch received SIGINT, SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2.
  Actions on_signal(int sig);
  Actions on_timer(action::Timer timer);

  bool finished() const { return finished_; }

 private:
  struct HostState {
    bool answered = false;
    std::vector<std::string> addresses;
    std::string error_partial;    ///< stderr after its last newline
    std::string last_error_line;  ///< its last non-empty line
    std::optional<int> status;
    bool output_open = true;
  };

  /// `why` empty: the host's ssh's last word, read to the end, or how it ended.
  void fail_preflight(size_t host, std::string why, Actions& a);
  std::string preflight_error() const;
  void go(Actions& a);
  void stop(Actions& a);
  void kill_running(int sig, Actions& a);
  void maybe_finish(Actions& a);
  int exit_code() const;

  std::vector<Host> hosts_;
  std::vector<HostState> state_;
  bool master_from_first_host_;
  double stop_timeout_s_;
  std::string version_;
  bool started_ = false;   ///< every host answered and was sent its variables
  bool stopping_ = false;  ///< every host's stdin was closed
  bool draining_ = false;  ///< every ssh ended: its output has kDrainTimeout left
  bool finished_ = false;
  int kill_signal_ = SIGTERM;  ///< what the kill timer sends next
  int signal_ = 0;
  int first_failure_ = 0;
  std::optional<size_t> failed_host_;  ///< the preflight's failure, printed at the end
  std::string failure_;
};

}  // namespace dtl::fanout
