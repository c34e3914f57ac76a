// One attempt's workers on this node: started together, their output relayed line by line, their
// exits collected through SIGCHLD, and stopped together by the stop sequence (group.h). Whether to
// restart, and what to tell other nodes, is the caller's policy.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "launcher/console.h"
#include "launcher/group.h"
#include "launcher/log_layout.h"
#include "node/orphan_guard.h"
#include "launcher/plan.h"

namespace dtl::store {
class Server;
}
namespace dtl::watch {
class HangWatch;
class LiveFigures;
}

namespace dtl::launcher {

class WorkerGroup final : public Group {
 public:
  /// Worker output goes to `console` (and to files as the plan says).
  WorkerGroup(boost::asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
              node::OrphanGuard& guard, Callbacks callbacks);
  ~WorkerGroup() override;

  /// Starts plan.nproc workers.
  void start(const GroupEnv& env) override;
  /// stop_sequence(sig, plan.shutdown_timeout_s), to every worker's process group.
  void stop(int sig) override;
  void kill() override;
  /// `sig` to every running worker's process group, as it is: nothing stops (SIGUSR1 for a checkpoint).
  void pass_on(int sig);
  bool active() const override;
  /// Collects exited children; call on every SIGCHLD.
  void reap();
  /// Takes torch's word in `store` that a collective timed out (NCCL's watchdog sets exception_dump)
  /// as a hang (HangWatch::signal). The store must outlive the group.
  void watch_store(store::Server& store);
  /// The hang watch over these workers (a node of a job of several wires it to the rendezvous).
  watch::HangWatch& hangs();
  /// The live view of these workers: `dtlaunch top` and the metrics (watch/live_figures.h).
  watch::LiveFigures& live();
  /// Whether any worker output went to per-rank files (the log directory is worth keeping).
  bool wrote_log_files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtl::launcher
