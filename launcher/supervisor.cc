#include "launcher/supervisor.h"

#include <signal.h>

#include <boost/asio/signal_set.hpp>

#include "launcher/supervisor_policy.h"
#include "launcher/worker_group.h"

namespace dtl::launcher {
namespace asio = boost::asio;

/// The event loop's side: signals in, the policy's ending out to the console.
struct Supervisor::Impl {
  Impl(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs, OrphanGuard& guard,
       std::string host)
      : io(io),
        console(console),
        plan(plan),
        signals(io),
        group(io, console, plan, logs, guard, {nullptr, [this](const Group::Result& r) { on_finished(r); }}),
        policy(group, plan.group, plan.title, std::move(host)) {}

  asio::io_context& io;
  Console& console;
  const LaunchPlan& plan;
  asio::signal_set signals;
  WorkerGroup group;
  SupervisorPolicy policy;
  int exit_code = 0;

  int run() {
    signals.add(SIGCHLD);
    for (int sig : plan.signals) signals.add(sig);
    wait_signal();
    policy.start();
    io.run();
    return exit_code;
  }

  void wait_signal() {
    signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        group.reap();
      } else {
        policy.on_signal(sig);
      }
      wait_signal();
    });
  }

  void on_finished(const Group::Result& result) {
    auto end = policy.on_finished(result);
    if (!end) return;
    if (!end->summary.empty()) console.write(2, end->summary);
    exit_code = end->exit_code;
    boost::system::error_code ignored;
    signals.cancel(ignored);
    io.stop();
  }
};

Supervisor::Supervisor(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
                       OrphanGuard& guard, std::string host)
    : impl_(std::make_unique<Impl>(io, console, plan, logs, guard, std::move(host))) {}
Supervisor::~Supervisor() = default;
int Supervisor::run() { return impl_->run(); }
bool Supervisor::wrote_log_files() const { return impl_->group.wrote_log_files(); }

}  // namespace dtl::launcher
