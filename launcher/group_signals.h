// The signals dtlaunch handles while workers run, in the event loop:
//   - SIGCHLD reaps the group's exits;
//   - the ones to forward (--signals_to_handle) go to the runner's policy, which stops the workers;
//   - SIGUSR1 and SIGUSR2, unless forwarded, go to every worker as they are and stop nothing: Slurm's
//     --signal=USR1@90 and submitit's SIGUSR2 ask the training code to checkpoint before a
//     pre-emption or a time limit (torchrun dies of them, leaving its workers);
//   - SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU and SIGXFSZ, unless forwarded, stop the job as SIGTERM
//     does, with a line that names them, when SIGTERM is forwarded.
// Real-time signals keep their default action: dtlaunch ends, and the job cgroup's guard stops the
// workers.
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
  std::vector<int> passed_on_;   ///< SIGUSR1, SIGUSR2: to the workers as they are
  std::vector<int> as_sigterm_;  ///< the other terminating signals: SIGTERM's stop
};

}  // namespace dtl::launcher
