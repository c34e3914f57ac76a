#include "watch/stacks_socket.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <spdlog/spdlog.h>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "base/error.h"
#include "base/posix.h"

namespace dtl::watch {
namespace asio = boost::asio;

std::string stacks_dir(bool create) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir =
      runtime && *runtime ? std::string(runtime) + "/dtlaunch" : "/tmp/dtlaunch-" + std::to_string(getuid());
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "";
  struct stat st {};
  // Another user's folder of that name (in /tmp anyone may make one) is never used.
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) return "";
  return dir;
}

std::vector<LiveJob> live_jobs() {
  std::vector<LiveJob> jobs;
  const std::string dir = stacks_dir(false);
  if (dir.empty()) return jobs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".sock")) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::filesystem::remove(entry.path(), ec);  // a SIGKILLed dtlaunch's
      continue;
    }
    jobs.push_back({pid, entry.path().string()});
  }
  return jobs;
}

StacksSocket::StacksSocket(boost::asio::io_context& io, std::function<void(Reply)> ask)
    : io_(io), ask_(std::move(ask)), acceptor_(io) {
  const std::string dir = stacks_dir(true);
  if (dir.empty()) return;  // `dtlaunch stacks` will say no job runs here
  const std::string path = dir + "/" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());  // a SIGKILLed dtlaunch's of the same pid
  boost::system::error_code ec;
  acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.bind(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec) acceptor_.listen(8, ec);
  if (ec) {
    spdlog::debug("no socket for `dtlaunch stacks` at {}: {}", path, ec.message());
    acceptor_.close(ec);
    return;
  }
  path_ = path;
  accept();
}

StacksSocket::~StacksSocket() {
  *alive_ = false;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  if (!path_.empty()) ::unlink(path_.c_str());
}

void StacksSocket::accept() {
  auto peer = std::make_shared<asio::local::stream_protocol::socket>(io_);
  acceptor_.async_accept(*peer, [this, peer](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      ::fcntl(peer->native_handle(), F_SETFD, FD_CLOEXEC);
      ucred cred{};
      socklen_t len = sizeof cred;
      // Only the job's own user, or root, may read its stacks (the folder is the user's alone too).
      if (getsockopt(peer->native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
          (cred.uid == getuid() || cred.uid == 0)) {
        read_ask(peer, [peer](std::string text) {
          auto kept = std::make_shared<std::string>(std::move(text));
          asio::async_write(*peer, asio::buffer(*kept), [peer, kept](const boost::system::error_code&, size_t) {});
        });
      }
    }
    accept();
  });
}

void StacksSocket::answer_ranks(std::function<void(Reply)> ranks) { ranks_ = std::move(ranks); }

void StacksSocket::read_ask(const std::shared_ptr<asio::local::stream_protocol::socket>& peer, Reply reply) {
  auto line = std::make_shared<std::string>();
  auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(2));
  timer->async_wait([peer](const boost::system::error_code& ec) {
    if (!ec) peer->cancel();  // an asker that says nothing wants the stacks
  });
  asio::async_read_until(*peer, asio::dynamic_buffer(*line, 64), '\n',
                         [this, peer, line, timer, reply, alive = alive_](const boost::system::error_code&, size_t) {
                           timer->cancel();
                           if (!*alive) return;
                           if (line->starts_with("ranks")) {
                             if (ranks_) return ranks_(reply);
                             return reply("dtlaunch: this dtlaunch has no ranks to show\n");
                           }
                           ask_(reply);
                         });
}

int print_stacks(const std::optional<pid_t>& pid) {
  auto jobs = live_jobs();
  if (pid) std::erase_if(jobs, [&](const LiveJob& j) { return j.pid != *pid; });
  if (jobs.empty()) {
    std::cerr << error_line(Error{pid ? "no dtlaunch job of yours with pid " + std::to_string(*pid) + " on this machine"
                                      : "no dtlaunch job of yours runs on this machine",
                                  1},
                            "dtlaunch stacks");
    return 1;
  }
  if (jobs.size() > 1) {
    std::string pids;
    for (const auto& j : jobs) pids += " " + std::to_string(j.pid);
    std::cerr << error_line(Error{std::to_string(jobs.size()) +
                                      " dtlaunch jobs of yours run here: name one by its pid (" + pids.substr(1) + ")",
                                  2},
                            "dtlaunch stacks");
    return 2;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, jobs[0].socket.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::cerr << error_line(
        Error{"cannot reach the job of pid " + std::to_string(jobs[0].pid) + ": " + std::strerror(errno), 1},
        "dtlaunch stacks");
    if (fd >= 0) ::close(fd);
    return 1;
  }
  ::shutdown(fd, SHUT_WR);  // no ask: the stacks
  auto got = posix::read_all(fd, 64 << 20);
  ::close(fd);
  if (got.text.empty()) {
    std::cerr << error_line(Error{"the job of pid " + std::to_string(jobs[0].pid) + " did not answer", 1},
                            "dtlaunch stacks");
    return 1;
  }
  std::cout << got.text << std::flush;
  return 0;
}

}  // namespace dtl::watch
