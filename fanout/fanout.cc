#include "fanout/fanout.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <deque>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "base/posix.h"
#include "fanout/fanout_state.h"
#include "fanout/top_relay.h"
#include "launcher/console.h"
#include "launcher/line_prefixer.h"
#include "node/spawn.h"
#include "watch/stacks_socket.h"

#ifndef DTL_VERSION
#define DTL_VERSION "unknown"
#endif

namespace dtl::fanout {
namespace asio = boost::asio;
using namespace action;

namespace {

constexpr int kTimers = 3;                                ///< action::Timer's values
constexpr auto kRelayTimeout = std::chrono::seconds(60);  ///< `dtlaunch stacks` through the first host

/// One host's ssh: its pipes, its output as whole lines with the host in front, and its pid.
struct Node {
  Node(asio::io_context& io, const NodeStart& s, size_t index)
      : start(s), index(index), in(io), out(io), err(io), out_lines(s.host + ": "), err_lines(s.host + ": ") {}
  const NodeStart& start;
  const size_t index;  ///< its place in the plan, which FanoutState's events name
  pid_t pid = -1;
  pid_t agent_pid = 0;  ///< the host's dtlaunch, from its hello
  bool reaped = false;
  asio::posix::stream_descriptor in, out, err;
  launcher::LinePrefixer out_lines, err_lines;
  std::array<char, 16384> out_buf{}, err_buf{};
  std::string before_hello;  ///< stdout until the hello line
  bool hello_read = false;
  int open_streams = 2;
  std::deque<std::string> sending;  ///< the wire's steps 2 and 3, the front one being written
};

class Fanout {
 public:
  Fanout(const FanoutPlan& plan, launcher::Console& console)
      : plan_(plan),
        console_(console),
        state_(hosts(plan), plan.master_from_first_host, plan.stop_timeout_s, DTL_VERSION),
        signals_(io_) {
    for (int t = 0; t < kTimers; ++t) timers_.emplace_back(std::make_unique<asio::steady_timer>(io_));
  }

  int run() {
    signals_.add(SIGCHLD);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) signals_.add(sig);
    wait_signal();
    for (const auto& s : plan_.nodes) nodes_.push_back(std::make_unique<Node>(io_, s, nodes_.size()));
    for (auto& n : nodes_) start(*n);
    apply(state_.start());
    // Its pending accept is work for the loop, which runs until no work is left: Finish closes it.
    socket_ = std::make_unique<watch::StacksSocket>(io_, [this](watch::StacksSocket::Ask ask) { stacks(ask.reply); });
    socket_->answer_ranks([this](watch::StacksSocket::Reply reply) { top_.ask(std::move(reply)); });
    io_.run();
    if (relay_.joinable()) relay_.join();
    console_.forget(io_);
    return exit_code_;
  }

 private:
  static std::vector<FanoutState::Host> hosts(const FanoutPlan& plan) {
    std::vector<FanoutState::Host> out;
    for (const auto& n : plan.nodes) out.push_back({n.host, n.variables});
    return out;
  }

  void start(Node& n) {
    std::array<int, 2> in{-1, -1}, out{-1, -1}, err{-1, -1};
    if (pipe2(in.data(), O_CLOEXEC) || pipe2(out.data(), O_CLOEXEC) || pipe2(err.data(), O_CLOEXEC)) {
      const int error = errno;
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
        if (fd >= 0) ::close(fd);
      }
      throw std::system_error(error, std::generic_category(), "pipe");
    }
    n.in.assign(in[1]);
    n.out.assign(out[0]);
    n.err.assign(err[0]);
    node::SpawnSpec spec{plan_.ssh_path, n.start.argv, plan_.environment, in[0], out[1], err[1]};
    try {
      n.pid = node::spawn_worker(spec);  // its own process group: signals and leftovers are the group's
    } catch (...) {
      for (int fd : {in[0], out[1], err[1]}) ::close(fd);
      throw;
    }
    for (int fd : {in[0], out[1], err[1]}) ::close(fd);
    read(n, n.out, n.out_buf, 1);
    read(n, n.err, n.err_buf, 2);
  }

  void read(Node& n, asio::posix::stream_descriptor& pipe, std::array<char, 16384>& buf, int fd) {
    pipe.async_read_some(asio::buffer(buf),
                         [this, &n, &pipe, &buf, fd](const boost::system::error_code& ec, size_t got) {
                           if (ec == asio::error::operation_aborted || state_.finished()) return;
                           std::string_view chunk(buf.data(), got);
                           std::string after_hello;  // only until the hello: the output after it is not copied
                           if (fd == 1 && !n.hello_read) chunk = after_hello = hello(n, chunk);
                           if (fd == 2) state_.on_error_output(n.index, chunk);
                           auto& prefixer = fd == 1 ? n.out_lines : n.err_lines;
                           std::string lines;
                           prefixer.feed(chunk, lines);
                           if (ec) prefixer.finish(lines);
                           // Before the job starts, a host's complaints are the preflight's to report.
                           if (!lines.empty() && (fd == 1 || state_.shows_errors())) console_.write(fd, lines);
                           if (ec) {
                             if (--n.open_streams == 0) apply(state_.on_output_closed(n.index));
                             return;
                           }
                           if (console_.backed_up()) {
                             console_.when_drained(io_, [this, &n, &pipe, &buf, fd] { read(n, pipe, buf, fd); });
                             return;
                           }
                           read(n, pipe, buf, fd);
                         });
  }

  /// Takes the hello line off the front of a node's stdout; returns what follows it.
  std::string hello(Node& n, std::string_view chunk) {
    n.before_hello.append(chunk);
    const auto eol = n.before_hello.find('\n');
    if (eol == std::string::npos) {
      if (n.before_hello.size() > kMaxHelloBytes) n.before_hello.erase(0, n.before_hello.size() - kMaxHelloBytes);
      return {};
    }
    const std::string line = n.before_hello.substr(0, eol);
    std::string rest = n.before_hello.substr(eol + 1);
    n.before_hello.clear();
    n.hello_read = true;
    if (auto said = parse_hello(line)) n.agent_pid = said->pid;
    apply(state_.on_hello(n.index, line));
    return rest;
  }

  void wait_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        reap();
      } else {
        apply(state_.on_signal(sig));
      }
      if (!state_.finished()) wait_signal();
    });
  }

  void reap() {
    top_.reap();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      auto& n = *nodes_[i];
      int status = 0;
      if (n.reaped || waitpid(n.pid, &status, WNOHANG) != n.pid) continue;
      n.reaped = true;
      apply(state_.on_exit(i, status));
    }
  }

  void apply(const FanoutState::Actions& actions) {
    for (const auto& action : actions) {
      std::visit([this](const auto& a) { act(a); }, action);
    }
  }

  void act(const Send& a) {
    auto& n = *nodes_[a.host];
    n.sending.push_back(a.bytes);
    if (n.sending.size() == 1) send_front(n);
  }
  void send_front(Node& n) {
    asio::async_write(n.in, asio::buffer(n.sending.front()), [this, &n](const boost::system::error_code& ec, size_t) {
      if (ec) return n.sending.clear();  // the host is gone: its exit says so
      n.sending.pop_front();
      if (!n.sending.empty()) send_front(n);
    });
  }
  void act(const CloseInput& a) {
    boost::system::error_code ignored;
    nodes_[a.host]->in.close(ignored);
  }
  void act(const Kill& a) {
    const auto& n = *nodes_[a.host];
    if (n.reaped) {
      ::kill(-n.pid, a.signal);  // what is left of its group; the pid itself may be another's now
    } else {
      node::signal_worker(n.pid, a.signal);
    }
  }
  /// `dtlaunch stacks` where the fan-out runs: the first host's, over the job's ssh, which gathers
  /// every host's ranks (its agent hosts the rendezvous).
  void stacks(std::function<void(std::string)> reply) {
    const Node& first = *nodes_.front();
    if (first.agent_pid <= 0) return reply("dtlaunch: " + first.start.host + " has not started its agent yet\n");
    if (relaying_)
      return reply("dtlaunch: the stacks are being read for another `dtlaunch stacks`: ask again in a moment\n");
    std::vector<std::string> argv = first.start.argv;
    argv.back() = "exec " + shell_quote(plan_.remote_dtlaunch) + " stacks " + std::to_string(first.agent_pid);
    relaying_ = true;
    if (relay_.joinable()) relay_.join();
    relay_ = std::jthread([this, argv, reply, host = first.start.host] {
      std::string text;
      for (const auto& line : posix::run_program(argv, kRelayTimeout).lines) text += line + "\n";
      if (text.empty()) text = "dtlaunch: no stacks came from " + host + " (`dtlaunch stacks` there)\n";
      asio::post(io_, [this, reply, text] {
        relaying_ = false;
        reply(text);
      });
    });
  }

  /// `dtlaunch top` where the fan-out runs: `dtlaunch top --stream` on the first host, over ssh.
  std::variant<node::SpawnSpec, std::string> top_over_ssh() {
    const Node& first = *nodes_.front();
    if (first.agent_pid <= 0) return "dtlaunch: " + first.start.host + " has not started its agent yet\n";
    std::vector<std::string> argv = first.start.argv;
    argv.back() = "exec " + shell_quote(plan_.remote_dtlaunch) + " top --stream " + std::to_string(first.agent_pid);
    return node::SpawnSpec{plan_.ssh_path, argv, plan_.environment};
  }

  void act(const Arm& a) {
    auto& timer = *timers_[static_cast<size_t>(a.timer)];
    timer.expires_after(a.after);
    timer.async_wait([this, which = a.timer](const boost::system::error_code& ec) {
      if (!ec) apply(state_.on_timer(which));
    });
  }
  void act(const Cancel& a) { timers_[static_cast<size_t>(a.timer)]->cancel(); }
  void act(const Write& a) { console_.write(a.fd, a.text); }
  void act(const Info& a) { spdlog::info("{}", a.text); }
  void act(const Finish& a) {
    exit_code_ = a.exit_code;
    socket_.reset();
    top_.stop();
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    for (auto& n : nodes_) {
      n->in.close(ignored);
      n->out.close(ignored);
      n->err.close(ignored);
    }
  }

  const FanoutPlan& plan_;
  launcher::Console& console_;
  FanoutState state_;
  asio::io_context io_;
  asio::signal_set signals_;
  std::vector<std::unique_ptr<asio::steady_timer>> timers_;  ///< by action::Timer
  std::vector<std::unique_ptr<Node>> nodes_;
  int exit_code_ = 1;
  bool relaying_ = false;
  std::jthread relay_;                                    ///< a `dtlaunch stacks` over ssh
  TopRelay top_{io_, [this] { return top_over_ssh(); }};  ///< `dtlaunch top`'s figures from the first host
  std::unique_ptr<watch::StacksSocket> socket_;           ///< `dtlaunch stacks`'s way in, until the job ends
};

}  // namespace

uint64_t fanout_descriptors(size_t hosts) { return 3 * static_cast<uint64_t>(hosts) + 64; }

Status check_fanout_limits(const FanoutPlan& plan) {
  const uint64_t limit = posix::raise_fd_limit();
  const uint64_t needed = fanout_descriptors(plan.nodes.size());
  if (needed <= limit) return {};
  return fail(std::to_string(plan.nodes.size()) + " hosts need about " + std::to_string(needed) +
              " open files, and `ulimit -n` allows " + std::to_string(limit) +
              " (raise the hard limit, or start fewer hosts from one dtlaunch)");
}

int run_fanout(const FanoutPlan& plan, launcher::Console& console) {
  // Each ssh gets back the limit this process had (spawn.cc).
  posix::raise_fd_limit();
  return Fanout(plan, console).run();
}

}  // namespace dtl::fanout
