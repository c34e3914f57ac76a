#include "launcher/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "launcher/posix_io.h"
#include "launcher/worker_group.h"

namespace dtl::launcher {
namespace asio = boost::asio;
/// The single-node policy: restart the group while restarts are left, else report the root cause.
struct Supervisor::Impl {
  Impl(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs, OrphanGuard& guard)
      : io(io),
        console(console),
        plan(plan),
        signals(io),
        group(io, console, plan, logs, guard,
              {nullptr, [this](const WorkerGroup::Result& r) { on_finished(r); }}) {}

  asio::io_context& io;
  Console& console;
  const LaunchPlan& plan;
  asio::signal_set signals;
  WorkerGroup group;
  int restart_count = 0;
  int stop_signal = 0;  ///< a signal dtlaunch received and forwarded
  int exit_code = 0;

  int run() {
    signals.add(SIGCHLD);
    for (int sig : plan.signals) signals.add(sig);
    wait_signal();
    start();
    io.run();
    return exit_code;
  }

  void start() {
    GroupEnv env = plan.group;
    env.restart_count = restart_count;
    group.start(env);
  }

  void wait_signal() {
    signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        group.reap();
      } else {
        on_stop_signal(sig);
      }
      wait_signal();
    });
  }

  void on_stop_signal(int sig) {
    if (!group.active()) return;
    if (stop_signal == 0) {
      spdlog::warn("received {}, stopping the workers", signal_name(sig));
      stop_signal = sig;
      group.stop(sig);
    } else {
      spdlog::warn("received {} while stopping: killing the workers now", signal_name(sig));
      stop_signal = sig;
      group.kill();
    }
  }

  void on_finished(const WorkerGroup::Result& result) {
    const auto& failures = result.failures;
    if (!failures.empty() && stop_signal == 0 && restart_count < plan.group.max_restarts) {
      ++restart_count;
      spdlog::warn("restarting the workers ({} of {} restarts) after rank {} failed", restart_count,
                   plan.group.max_restarts, root_cause(failures).rank);
      start();
      return;
    }
    if (!failures.empty()) {
      console.write(2, "\n" + format_summary(plan.title, failures, host_name()) + "\n");
      exit_code = exit_code_for(root_cause(failures));
    }
    if (result.start_failed) exit_code = 1;
    if (stop_signal != 0) exit_code = 128 + stop_signal;
    boost::system::error_code ignored;
    signals.cancel(ignored);
    io.stop();
  }
};

Supervisor::Supervisor(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
                       OrphanGuard& guard)
    : impl_(std::make_unique<Impl>(io, console, plan, logs, guard)) {}
Supervisor::~Supervisor() = default;
int Supervisor::run() { return impl_->run(); }
bool Supervisor::wrote_log_files() const { return impl_->group.wrote_log_files(); }

}  // namespace dtl::launcher
