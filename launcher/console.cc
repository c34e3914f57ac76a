#include "launcher/console.h"

#include <signal.h>

#include <boost/asio/post.hpp>
#include <spdlog/sinks/base_sink.h>

#include "base/posix.h"

namespace dtl::launcher {
namespace {

class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(Console& console) : console_(console) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    console_.write(2, std::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}

 private:
  Console& console_;
};

}  // namespace

Console::Console(size_t backlog_limit) : limit_(backlog_limit) {
  // Signals are for the event loop's thread: the writers start with all of them blocked.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  for (int i = 0; i < 2; ++i) {
    channels_[i].fd = i + 1;
    channels_[i].thread = std::thread([this, i] { run(channels_[i]); });
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

Console::~Console() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  for (auto& c : channels_) {
    c.wake.notify_one();
    c.thread.join();
  }
}

void Console::write(int fd, std::string_view text) {
  Channel& c = channels_[fd == 1 ? 0 : 1];
  {
    std::lock_guard lock(mutex_);
    if (text.empty() || !c.alive) return;
    c.queued.append(text);
    c.pending += text.size();
  }
  c.wake.notify_one();
}

bool Console::over(size_t limit) const {
  return channels_[0].pending > limit || channels_[1].pending > limit;
}

bool Console::backed_up() const {
  std::lock_guard lock(mutex_);
  return over(limit_);
}

void Console::when_drained(boost::asio::io_context& io, std::function<void()> resume) {
  {
    std::lock_guard lock(mutex_);
    if (over(limit_ / 2)) {
      waiters_.push_back({&io, std::move(resume)});
      return;
    }
  }
  boost::asio::post(io, std::move(resume));
}

void Console::forget(boost::asio::io_context& io) {
  std::lock_guard lock(mutex_);
  std::erase_if(waiters_, [&](const Waiter& w) { return w.io == &io; });
}

std::shared_ptr<spdlog::sinks::sink> Console::sink() { return std::make_shared<ConsoleSink>(*this); }

void Console::run(Channel& c) {
  std::string batch;  // swapped with c.queued: two buffers, reused, no allocation per write
  std::unique_lock lock(mutex_);
  while (true) {
    c.wake.wait(lock, [&] { return stop_ || !c.queued.empty(); });
    if (c.queued.empty()) return;  // stopping, and everything is written
    batch.clear();
    batch.swap(c.queued);
    lock.unlock();
    // A reader that went away (`dtlaunch ... | head`) is not an error: this output is dropped.
    const bool ok = posix::write_all(c.fd, batch);
    lock.lock();
    if (!ok) {
      c.alive = false;
      c.pending -= c.queued.size();
      c.queued.clear();
    }
    c.pending -= batch.size();
    if (!over(limit_ / 2)) {
      for (auto& w : waiters_) boost::asio::post(*w.io, std::move(w.resume));
      waiters_.clear();
    }
  }
}

}  // namespace dtl::launcher
