#include "watch/stacks_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "base/posix.h"
#include "base/printable.h"

namespace dtl::watch {
namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

/// A client still connected this long after it came has had its answer or will not get one: a
/// gathering over several nodes takes at most 25 s, a stack reader 10 s.
constexpr auto kClientDeadline = std::chrono::seconds(120);
/// An ask is a short word: a first line this long without its end asks for the stacks.
constexpr size_t kMaxAskLine = 64;

/// "<dir>.XXXXXX" beside `dir`, this user's alone, for a job whose folder another user took first.
std::string make_private_folder(const std::string& dir) {
  std::string pattern = dir + ".XXXXXX";
  if (!::mkdtemp(pattern.data())) return "";
  return pattern;
}

/// The folder this dtlaunch's socket goes in, made when missing; where another user's (or anything
/// but a folder of this user's alone) is there, a private one beside it, set in `made` and said in
/// a warning. "" when there is none.
std::string socket_folder(std::string& made) {
  const std::string dir = stacks_dir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    spdlog::debug("no socket for `dtlaunch stacks`: cannot make {}: {}", dir, std::strerror(errno));
    return "";
  }
  const std::string why = unfit_folder(dir);
  if (why.empty()) return dir;
  made = make_private_folder(dir);
  if (made.empty()) {
    spdlog::warn("{} {}, and no folder could be made beside it ({}): `dtlaunch stacks` cannot reach this job",
                 printable(dir, 200), why, std::strerror(errno));
    return "";
  }
  spdlog::warn("{} {}, so dtlaunch does not use it: `dtlaunch stacks` finds this job in {} instead",
               printable(dir, 200), why, made);
  return made;
}

}  // namespace

std::string stacks_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/dtlaunch" : "/tmp/dtlaunch-" + std::to_string(getuid());
}

std::string unfit_folder(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return std::string("cannot be read (") + std::strerror(errno) + ")";
  if (!S_ISDIR(st.st_mode)) return "is " + posix::file_kind(dir).value_or("gone");
  if (st.st_uid != getuid()) return "belongs to uid " + std::to_string(st.st_uid);
  if (st.st_mode & 077) return fmt::format("is open to other users (mode {:04o})", st.st_mode & 07777);
  return "";
}

std::vector<std::string> fallback_dirs() {
  const std::filesystem::path dir = stacks_dir();
  const std::string prefix = dir.filename().string() + ".";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == prefix.size() + 6 && name.starts_with(prefix) && unfit_folder(entry.path().string()).empty()) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

int connect_to_job(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval wait{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (posix::retry_eintr([&] { return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr); }) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

std::vector<LiveJob> live_jobs() {
  std::vector<LiveJob> jobs;
  std::vector<std::string> dirs = fallback_dirs();
  if (unfit_folder(stacks_dir()).empty()) dirs.insert(dirs.begin(), stacks_dir());
  for (const auto& dir : dirs) {
    std::error_code ec;
    bool removed = false;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      const std::string path = entry.path().string();
      struct stat st {};
      if (!name.ends_with(".sock") || ::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
      if (pid <= 0) continue;
      const int fd = connect_to_job(path);
      if (fd < 0) {
        // Nobody listens: its dtlaunch was SIGKILLed, and the pid may be any process's now.
        if (errno == ECONNREFUSED) removed |= ::unlink(path.c_str()) == 0;
        if (errno == EAGAIN) jobs.push_back({pid, path});  // a backlog full of other asks: it lives
        continue;
      }
      ucred cred{};
      socklen_t len = sizeof cred;
      const bool its_own =
          getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid == pid && cred.uid == getuid();
      ::close(fd);  // gone at once: the job makes no read for it
      if (its_own) jobs.push_back({pid, path});
    }
    if (removed && dir != stacks_dir()) ::rmdir(dir.c_str());  // a SIGKILLed job's own folder, once empty
  }
  return jobs;
}

struct StacksSocket::Client {
  explicit Client(local::socket s) : socket(std::move(s)), deadline(socket.get_executor()) {}
  local::socket socket;
  asio::steady_timer deadline;  ///< kAskWait for its ask, then kClientDeadline from its coming
  const std::chrono::steady_clock::time_point came = std::chrono::steady_clock::now();
  std::string line;      ///< what it said before its first newline
  bool said = false;     ///< its ask is known
  bool waiting = false;  ///< for the answer of the stacks ask under way
  bool open = true;
  std::string reply;
};

StacksSocket::StacksSocket(boost::asio::io_context& io, std::function<void(Ask)> ask)
    : io_(io), ask_(std::move(ask)), alive_(std::make_shared<bool>(true)) {
  const std::string dir = socket_folder(own_dir_);
  if (dir.empty()) return;  // `dtlaunch stacks` will say no job runs here
  const std::string path = dir + "/" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());  // a SIGKILLed dtlaunch's of the same pid
  boost::system::error_code ec;
  local::acceptor acceptor(io);
  acceptor.open(local(), ec);
  if (!ec) net::close_on_exec(acceptor.native_handle());
  if (!ec) acceptor.bind(local::endpoint(path), ec);
  if (!ec) acceptor.listen(64, ec);
  if (ec) {
    spdlog::debug("no socket for `dtlaunch stacks` at {}: {}", path, ec.message());
    return;
  }
  path_ = path;
  // Handlers run only until the destructor stops the loop: `this` is alive.
  loop_ = net::LocalAcceptLoop::start(std::move(acceptor), {},
                                      {[this](local::socket s, const local::endpoint&) { accepted(std::move(s)); },
                                       [this](const boost::system::error_code& error, bool paused) {
                                         if (!paused || std::exchange(said_out_of_descriptors_, true)) return;
                                         spdlog::warn(
                                             "`dtlaunch stacks`: cannot accept connections ({}); trying "
                                             "again every 100 ms",
                                             error.message());
                                       }});
}

StacksSocket::~StacksSocket() {
  *alive_ = false;
  if (loop_) loop_->stop();
  for (auto& c : clients_) {
    boost::system::error_code ignored;
    c->socket.close(ignored);
    c->deadline.cancel();
  }
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!own_dir_.empty()) ::rmdir(own_dir_.c_str());
}

void StacksSocket::accepted(local::socket socket) {
  said_out_of_descriptors_ = false;
  const int fd = socket.native_handle();
  ucred cred{};
  socklen_t len = sizeof cred;
  // Only the job's own user, or root, may read its stacks (the folder is the user's alone too).
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || (cred.uid != getuid() && cred.uid != 0)) return;
  if (clients_.size() >= kMaxClients) {
    const std::string busy =
        fmt::format("dtlaunch: {} `dtlaunch stacks` already wait for this job's answer: ask again once they have it\n",
                    kMaxClients);
    [[maybe_unused]] auto sent = ::send(fd, busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return;
  }
  char byte;
  if (::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return;  // gone already: no read for it
  auto client = std::make_shared<Client>(std::move(socket));
  clients_.push_back(client);
  expire(client, client->came + kAskWait);
  watch(client);
}

void StacksSocket::expire(const std::shared_ptr<Client>& client, std::chrono::steady_clock::time_point at) {
  client->deadline.expires_at(at);
  client->deadline.async_wait([this, client, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive || !client->open) return;
    if (client->said) return drop(client);  // it had its answer, or will not get one
    asked(client, "");                      // silent this long: the stacks
  });
}

void StacksSocket::watch(const std::shared_ptr<Client>& client) {
  client->socket.async_wait(
      local::socket::wait_read, [this, client, alive = alive_](const boost::system::error_code& ec) {
        if (ec || !*alive || !client->open) return;
        const long n = ::recv(client->socket.native_handle(), scratch_.data(), scratch_.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          // A ranks ask costs no read: a client done writing gets its answer all the same.
          if (client->said && !client->waiting) return;
          return drop(client);
        }
        if (n > 0 && !client->said) {
          const std::string_view got(scratch_.data(), static_cast<size_t>(n));
          const size_t eol = got.find('\n');
          client->line.append(got.substr(0, eol));
          if (eol != std::string_view::npos || client->line.size() >= kMaxAskLine) {
            asked(client, client->line);
            if (!client->open) return;
          }
        }
        watch(client);
      });
}

void StacksSocket::asked(const std::shared_ptr<Client>& client, std::string_view line) {
  client->said = true;
  expire(client, client->came + kClientDeadline);
  if (line.starts_with("ranks")) {  // `dtlaunch top`: the figures, which read no stack
    if (!ranks_) return send(client, "dtlaunch: this dtlaunch has no ranks to show\n");
    return ranks_([this, client, alive = alive_](std::string text) {
      if (*alive) send(client, std::move(text));
    });
  }
  client->waiting = true;
  if (asking_) return;  // the ask under way answers it too
  asking_ = true;
  ask_({[this, alive = alive_](std::string text) {
          if (*alive) answer(std::move(text));
        },
        [this, alive = alive_] {
          if (!*alive) return false;
          for (const auto& c : clients_) {
            if (c->waiting && c->open) return true;
          }
          return false;
        }});
}

void StacksSocket::answer(std::string text) {
  asking_ = false;
  const auto waiting = clients_;
  for (const auto& c : waiting) {
    if (!c->waiting || !c->open) continue;
    c->waiting = false;
    send(c, text);
  }
}

void StacksSocket::send(const std::shared_ptr<Client>& client, std::string text) {
  if (!client->open) return;
  client->reply = std::move(text);
  asio::async_write(client->socket, asio::buffer(client->reply),
                    [this, client, alive = alive_](const boost::system::error_code&, size_t) {
                      if (*alive) drop(client);
                    });
}

void StacksSocket::drop(const std::shared_ptr<Client>& client) {
  if (!client->open) return;
  client->open = false;
  boost::system::error_code ignored;
  client->socket.close(ignored);
  client->deadline.cancel();
  clients_.remove(client);
}

}  // namespace dtl::watch
