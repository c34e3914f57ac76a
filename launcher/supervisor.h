// Runs a LaunchPlan: starts the worker group, relays its output, notices every exit through
// SIGCHLD in one Boost.Asio loop, stops and restarts the group, and reports the root cause.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "launcher/console.h"
#include "launcher/log_layout.h"
#include "launcher/orphan_guard.h"
#include "launcher/plan.h"

namespace dtl::launcher {

class Supervisor {
 public:
  Supervisor(boost::asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
             OrphanGuard& guard);
  ~Supervisor();

  /// Runs until the group succeeded, failed with no restarts left, or dtlaunch was signalled.
  /// Returns dtlaunch's exit code: 0, the root cause's exit code (128+N for signal N), or 128+N
  /// for a signal N that stopped dtlaunch.
  int run();

  /// Whether any worker output went to per-rank files (the log directory is worth keeping).
  bool wrote_log_files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtl::launcher
