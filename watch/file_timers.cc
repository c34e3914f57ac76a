#include "watch/file_timers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "base/printable.h"

namespace dtl::watch {
namespace asio = boost::asio;

namespace {
constexpr auto kInterval = std::chrono::milliseconds(100);  ///< torch's agent: max_interval=0.1
constexpr size_t kMaxLine = 4096;                           ///< PIPE_BUF, what a client may write

double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

std::optional<TimerRequest> parse_timer_request(const std::string& line) {
  try {
    const YAML::Node n = YAML::Load(line);
    if (!n.IsMap() || !n["pid"] || !n["scope_id"] || !n["expiration_time"]) return std::nullopt;
    TimerRequest r;
    r.pid = n["pid"].as<pid_t>();
    r.scope = n["scope_id"].as<std::string>();
    r.expiration_time = n["expiration_time"].as<double>();
    r.signal = n["signal"] ? n["signal"].as<int>() : 0;
    if (r.pid <= 0 || r.signal < 0 || r.signal >= 65) return std::nullopt;
    return r;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> BadLineLog::note(const std::string& line, Clock::time_point now) {
  if (said_ < kInFull) {
    ++said_;
    return "expiration timers: not a FileTimerClient request: " + printable(line, 200) +
           (said_ == kInFull ? " (more such lines are counted, not shown)" : "");
  }
  if (counted_++ == 0) due_ = now + interval_;
  return std::nullopt;
}

std::optional<std::string> BadLineLog::summary() {
  due_.reset();
  if (counted_ == 0) return std::nullopt;
  const size_t n = std::exchange(counted_, 0);
  return "expiration timers: " + std::to_string(n) +
         (n == 1 ? " more line that is not a FileTimerClient request"
                 : " more lines that are not FileTimerClient requests");
}

void TimerTable::on_request(const TimerRequest& r) {
  const auto key = std::make_pair(r.pid, r.scope);
  if (r.expiration_time < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = r;
  }
}

std::vector<TimerTable::Expired> TimerTable::expire(double now) {
  std::map<pid_t, std::vector<TimerRequest>> by_pid;
  for (const auto& [key, r] : timers_) {
    if (r.expiration_time <= now) by_pid[key.first].push_back(r);
  }
  std::vector<Expired> out;
  for (auto& [pid, expired] : by_pid) {
    std::sort(expired.begin(), expired.end(),
              [](const TimerRequest& a, const TimerRequest& b) { return a.expiration_time < b.expiration_time; });
    Expired e{pid, 0, {}};
    for (const auto& r : expired) {
      e.scopes.push_back(r.scope);
      if (!e.signal && r.signal > 0) e.signal = r.signal;
    }
    forget(pid);  // torch clears a reaped pid's timers, expired or not
    out.push_back(std::move(e));
  }
  return out;
}

void TimerTable::forget(pid_t pid) {
  std::erase_if(timers_, [pid](const auto& entry) { return entry.first.first == pid; });
}

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path,
                                 std::function<bool(pid_t, int, const std::vector<std::string>&)> fire)
    : fifo_(io), tick_(io), bad_lines_due_(io), path_(std::move(path)), fire_(std::move(fire)) {
  ::unlink(path_.c_str());
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot make the timer FIFO " + path_);
  }
  // Read and write: the FIFO never reaches its end between clients, and a client's non-blocking
  // open for writing always finds a reader.
  const int fd = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open the timer FIFO " + path_);
  fifo_.assign(fd);
  read();
}

FileTimerServer::~FileTimerServer() {
  boost::system::error_code ignored;
  fifo_.close(ignored);
  tick_.cancel();
  bad_lines_due_.cancel();
  if (auto said = bad_lines_.summary()) spdlog::warn("{}", *said);
  ::unlink(path_.c_str());
}

void FileTimerServer::not_a_request(const std::string& line) {
  if (auto said = bad_lines_.note(line, BadLineLog::Clock::now())) spdlog::warn("{}", *said);
  if (!bad_lines_.due() || bad_lines_due_.expiry() == *bad_lines_.due()) return;
  bad_lines_due_.expires_at(*bad_lines_.due());
  bad_lines_due_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto said = bad_lines_.summary()) spdlog::warn("{}", *said);
  });
}

void FileTimerServer::read() {
  fifo_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
    if (ec) return;
    pending_.append(buf_.data(), n);
    for (size_t eol; (eol = pending_.find('\n')) != std::string::npos;) {
      const std::string line = pending_.substr(0, eol);
      pending_.erase(0, eol + 1);
      if (auto r = parse_timer_request(line)) {
        table_.on_request(*r);
      } else {
        not_a_request(line);
      }
    }
    if (pending_.size() > kMaxLine) pending_.clear();
    arm();
    read();
  });
}

void FileTimerServer::arm() {
  if (armed_ || table_.empty()) return;
  armed_ = true;
  tick_.expires_after(kInterval);
  tick_.async_wait([this](const boost::system::error_code& ec) {
    armed_ = false;
    if (ec) return;
    for (auto& e : table_.expire(wall_now())) {
      for (auto& scope : e.scopes) scope = printable(scope, 100);
      if (!e.signal) {
        spdlog::info("expiration timers: {} of pid {} expired, with no signal to send", e.scopes.front(), e.pid);
      } else if (!fire_(e.pid, e.signal, e.scopes)) {
        spdlog::warn("expiration timers: pid {} is no worker of this job: not signalled", e.pid);
      }
    }
    arm();
  });
}

}  // namespace dtl::watch
