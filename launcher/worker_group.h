// One attempt's workers on this node: started together, their output relayed line by line, their
// exits collected through SIGCHLD, and stopped together (stop signal, then SIGKILL after the grace).
// Whether to restart, and what to tell other nodes, is the caller's business.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "launcher/console.h"
#include "launcher/failure.h"
#include "launcher/log_layout.h"
#include "launcher/orphan_guard.h"
#include "launcher/plan.h"

namespace dtl::launcher {

class WorkerGroup {
 public:
  struct Result {
    std::vector<WorkerFailure> failures;  ///< workers that failed on their own; empty: success or stopped
    bool start_failed = false;            ///< a worker could not be started (fork, pipe, files)
  };
  struct Callbacks {
    /// The first failures, as soon as they are seen; the group is already stopping the others.
    std::function<void(const std::vector<WorkerFailure>&)> on_failure;
    /// Every worker and everything it left behind is gone, and its output drained.
    std::function<void(const Result&)> on_finished;
  };

  /// Worker output goes to `console` (and to files as the plan says).
  WorkerGroup(boost::asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
              OrphanGuard& guard, Callbacks callbacks);
  ~WorkerGroup();

  /// Starts plan.nproc workers with this attempt's environment (group.restart_count names the attempt).
  void start(const GroupEnv& group);
  /// The stop sequence: `sig` to every worker's process group, SIGKILL after the shutdown timeout.
  void stop(int sig);
  /// SIGKILL to every worker now.
  void kill();
  /// Collects exited children; call on every SIGCHLD.
  void reap();
  /// Started and not yet finished.
  bool active() const;
  /// Whether any worker output went to per-rank files (the log directory is worth keeping).
  bool wrote_log_files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtl::launcher
