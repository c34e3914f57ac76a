#include "fanout/top_relay.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dtl::fanout {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kFresh = std::chrono::milliseconds(1500);  ///< the remote side prints one a second
constexpr auto kFirstWait = std::chrono::seconds(20);     ///< ssh's connect, then the first snapshot
constexpr auto kIdle = std::chrono::seconds(10);          ///< after the last ask, the ssh ends
constexpr size_t kMaxLine = 16 << 20;
constexpr size_t kMaxErrors = 4096;

}  // namespace

struct TopRelay::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, std::function<std::variant<node::SpawnSpec, std::string>()> start)
      : io(io), start(std::move(start)), in(io), out(io), err(io), wait_timer(io), idle_timer(io) {}
  asio::io_context& io;
  std::function<std::variant<node::SpawnSpec, std::string>()> start;
  asio::posix::stream_descriptor in, out, err;
  asio::steady_timer wait_timer, idle_timer;
  pid_t pid = -1;            ///< the running ssh
  std::vector<pid_t> ended;  ///< ssh processes signalled to end, not yet reaped
  unsigned generation = 0;   ///< an ended ssh's handlers are ignored
  std::array<char, 65536> buf{};
  std::array<char, 1024> err_buf{};
  std::string partial, errors, latest;
  Clock::time_point latest_at{};
  std::vector<Reply> waiting;

  void ask(Reply reply) {
    idle_timer.expires_after(kIdle);
    idle_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->end("");
    });
    if (!latest.empty() && Clock::now() - latest_at < kFresh) return reply(latest);
    waiting.push_back(std::move(reply));
    if (pid < 0 && !launch()) return;
    if (waiting.size() > 1) return;
    wait_timer.expires_after(kFirstWait);
    wait_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec)
        self->answer_all("dtlaunch: no figures came through ssh in " + std::to_string(kFirstWait.count()) + " s\n");
    });
  }

  bool launch() {
    auto spec = start();
    if (auto* why = std::get_if<std::string>(&spec)) {
      answer_all(*why);
      return false;
    }
    auto& s = std::get<node::SpawnSpec>(spec);
    int p_in[2], p_out[2], p_err[2];
    if (pipe2(p_in, O_CLOEXEC) || pipe2(p_out, O_CLOEXEC) || pipe2(p_err, O_CLOEXEC)) {
      answer_all("dtlaunch: cannot relay the figures: no pipe\n");
      return false;
    }
    s.stdin_fd = p_in[0];
    s.stdout_fd = p_out[1];
    s.stderr_fd = p_err[1];
    try {
      pid = node::spawn_worker(s);
    } catch (const std::exception&) {
      pid = -1;
    }
    for (int fd : {p_in[0], p_out[1], p_err[1]}) ::close(fd);
    in.assign(p_in[1]);
    out.assign(p_out[0]);
    err.assign(p_err[0]);
    if (pid < 0) {
      end("dtlaunch: cannot start ssh to relay the figures\n");
      return false;
    }
    partial.clear();
    errors.clear();
    ++generation;
    read();
    read_errors();
    return true;
  }

  void read() {
    out.async_read_some(asio::buffer(buf), [self = shared_from_this(), generation = generation](
                                               const boost::system::error_code& ec, size_t n) {
      if (generation != self->generation) return;
      self->partial.append(self->buf.data(), n);
      for (size_t eol; (eol = self->partial.find('\n')) != std::string::npos;) {
        self->latest = self->partial.substr(0, eol) + "\n";
        self->latest_at = Clock::now();
        self->partial.erase(0, eol + 1);
        self->answer_all(self->latest);
      }
      if (self->partial.size() > kMaxLine) self->partial.clear();
      if (ec) return self->end(self->errors.empty() ? "" : "dtlaunch: " + self->errors);
      self->read();
    });
  }

  void read_errors() {
    err.async_read_some(asio::buffer(err_buf), [self = shared_from_this(), generation = generation](
                                                   const boost::system::error_code& ec, size_t n) {
      if (generation != self->generation) return;
      if (self->errors.size() < kMaxErrors) self->errors.append(self->err_buf.data(), std::min(n, kMaxErrors));
      if (!ec) self->read_errors();
    });
  }

  void answer_all(const std::string& text) {
    wait_timer.cancel();
    for (auto& r : std::exchange(waiting, {})) r(text);
  }

  /// The ssh ends (its stdin closed, its group signalled); who waits gets `why`.
  void end(const std::string& why) {
    boost::system::error_code ignored;
    in.close(ignored);
    out.close(ignored);
    err.close(ignored);
    idle_timer.cancel();
    ++generation;
    if (pid > 0) {
      node::signal_worker(pid, SIGTERM);
      ended.push_back(std::exchange(pid, -1));
    }
    latest.clear();
    if (!waiting.empty()) answer_all(why.empty() ? "dtlaunch: the relay of the figures ended\n" : why);
  }

  void reap() {
    int status = 0;
    std::erase_if(ended, [&](pid_t p) { return waitpid(p, &status, WNOHANG) == p; });
    if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) pid = -1;  // its output's end ends the relay
  }
};

TopRelay::TopRelay(asio::io_context& io, std::function<std::variant<node::SpawnSpec, std::string>()> start)
    : impl_(std::make_shared<Impl>(io, std::move(start))) {}
TopRelay::~TopRelay() { impl_->end(""); }
void TopRelay::ask(Reply reply) { impl_->ask(std::move(reply)); }
void TopRelay::reap() { impl_->reap(); }
void TopRelay::stop() { impl_->end(""); }

}  // namespace dtl::fanout
