// Runs a LaunchPlan on one node: the worker group in one Boost.Asio loop that hears SIGCHLD and the
// signals to forward, under SupervisorPolicy (restarts, stop, exit code).
#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "launcher/console.h"
#include "launcher/log_layout.h"
#include "launcher/orphan_guard.h"
#include "launcher/plan.h"
#include "launcher/runner.h"

namespace dtl::launcher {

class Supervisor final : public Runner {
 public:
  /// `host` names this node in the failure summary.
  Supervisor(boost::asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
             OrphanGuard& guard, std::string host);
  ~Supervisor() override;
  int run() override;
  bool wrote_log_files() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtl::launcher
