#include "launcher/group_signals.h"

#include <signal.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "base/posix.h"
#include "launcher/failure_summary.h"

namespace dtl::launcher {

GroupSignals::GroupSignals(boost::asio::io_context& io, const std::vector<int>& forwarded, WorkerGroup& group,
                           std::function<void(int)> on_signal)
    : signals_(io), group_(group), on_signal_(std::move(on_signal)) {
  signals_.add(SIGCHLD);
  for (int sig : forwarded) signals_.add(sig);
  const auto is_forwarded = [&](int sig) { return std::find(forwarded.begin(), forwarded.end(), sig) != forwarded.end(); };
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (!is_forwarded(sig)) passed_on_.push_back(sig);
  }
  if (is_forwarded(SIGTERM)) {
    for (int sig : {SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ}) {
      if (!is_forwarded(sig)) as_sigterm_.push_back(sig);
    }
  }
  for (int sig : passed_on_) signals_.add(sig);
  for (int sig : as_sigterm_) signals_.add(sig);
  wait();
}

void GroupSignals::cancel() {
  boost::system::error_code ignored;
  signals_.cancel(ignored);
}

void GroupSignals::wait() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    const auto among = [sig](const std::vector<int>& list) { return std::find(list.begin(), list.end(), sig) != list.end(); };
    if (sig == SIGCHLD) {
      group_.reap();
    } else if (among(passed_on_)) {
      spdlog::info("passing {} on to the workers", posix::signal_name(sig));
      group_.pass_on(sig);
    } else if (among(as_sigterm_)) {
      spdlog::warn("received {}: stopping the workers as for SIGTERM", posix::signal_name(sig));
      on_signal_(SIGTERM);
    } else {
      on_signal_(sig);
    }
    wait();
  });
}

}  // namespace dtl::launcher
