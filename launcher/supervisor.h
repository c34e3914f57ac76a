// Runs a LaunchPlan on one node: the worker group in one Boost.Asio loop that hears SIGCHLD and the
// signals to forward, under SupervisorState (restarts, stop, exit code).
#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "launcher/console.h"
#include "launcher/log_layout.h"
#include "node/orphan_guard.h"
#include "launcher/plan.h"
#include "launcher/runner.h"

namespace dtl::launcher {

/// `host` names this node in the failure summary.
std::unique_ptr<Runner> make_supervisor(boost::asio::io_context& io, Console& console, const LaunchPlan& plan,
                                        RunLogDir& logs, node::OrphanGuard& guard, std::string host);

}  // namespace dtl::launcher
