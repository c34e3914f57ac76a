// The signals dtlaunch handles while workers run, in the event loop: SIGCHLD reaps the group's
// exits, the ones to forward (--signals_to_handle) go to the runner's policy.
#pragma once

#include <functional>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "launcher/worker_group.h"

namespace dtl::launcher {

class GroupSignals {
 public:
  GroupSignals(boost::asio::io_context& io, const std::vector<int>& forwarded, WorkerGroup& group,
               std::function<void(int)> on_signal);
  /// Stops listening (the run is over).
  void cancel();

 private:
  void wait();

  boost::asio::signal_set signals_;
  WorkerGroup& group_;
  std::function<void(int)> on_signal_;
};

}  // namespace dtl::launcher
