#include "launcher/group_signals.h"

#include <signal.h>

namespace dtl::launcher {

GroupSignals::GroupSignals(boost::asio::io_context& io, const std::vector<int>& forwarded, WorkerGroup& group,
                           std::function<void(int)> on_signal)
    : signals_(io), group_(group), on_signal_(std::move(on_signal)) {
  signals_.add(SIGCHLD);
  for (int sig : forwarded) signals_.add(sig);
  wait();
}

void GroupSignals::cancel() {
  boost::system::error_code ignored;
  signals_.cancel(ignored);
}

void GroupSignals::wait() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGCHLD) {
      group_.reap();
    } else {
      on_signal_(sig);
    }
    wait();
  });
}

}  // namespace dtl::launcher
