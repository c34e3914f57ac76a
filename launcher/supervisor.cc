#include "launcher/supervisor.h"

#include <optional>

#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/posix.h"
#include "launcher/group_signals.h"
#include "launcher/supervisor_state.h"
#include "launcher/worker_group.h"
#include "watch/live_figures.h"
#include "store/server.h"

namespace dtl::launcher {
namespace asio = boost::asio;
namespace {

/// The event loop's side of SupervisorState: signals in, its warnings to the log and its ending to the console.
class Supervisor final : public Runner {
 public:
  Supervisor(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs, node::OrphanGuard& guard,
             std::string host)
      : io_(io),
        console_(console),
        plan_(plan),
        group_(io, console, plan, logs, guard, {nullptr, [this](const Group::Result& r) { on_finished(r); }}),
        policy_(group_, plan.group, plan.title, std::move(host)),
        signals_(io, plan.signals, group_, [this](int sig) { log(policy_.on_signal(sig)); }) {}

  Result<int> run() override {
    if (plan_.group.agent_store) {
      if (auto served = serve_store(); !served) return tl::unexpected(served.error());
    }
    if (const auto& m = plan_.metrics) {
      if (auto served = group_.live().serve_metrics(m->addr, m->port, m->called); !served) {
        return tl::unexpected(served.error());
      }
    }
    policy_.start();
    io_.run();
    return exit_code_;
  }
  bool wrote_log_files() const override { return group_.wrote_log_files(); }

 private:
  /// The workers' store on master_addr:master_port (checked free by the plan), as torchrun 2.x's
  /// agent serves it; a port taken since is bad input, and nothing has started.
  Status serve_store() {
    try {
      // Before the store sizes its connection cap from the limit; workers get theirs back (spawn.cc).
      posix::raise_fd_limit();
      store_.emplace(io_);
      store_->serve(store::listen_on(io_, plan_.group.master_addr, plan_.group.master_port));
      group_.watch_store(*store_);
    } catch (const std::runtime_error& e) {
      return fail(e.what());
    }
    return {};
  }

  void on_finished(const Group::Result& result) {
    // Every worker has exited: a restart's group starts on an empty store, its old waits failed.
    if (store_) store_->reset();
    auto step = policy_.on_finished(result);
    log(step.warnings);
    const auto& end = step.ending;
    if (!end) return;
    if (!end->summary.empty()) console_.write(2, end->summary);
    exit_code_ = end->exit_code;
    signals_.cancel();
    io_.stop();
  }

  static void log(const std::vector<std::string>& warnings) {
    for (const auto& w : warnings) spdlog::warn("{}", w);
  }

  asio::io_context& io_;
  Console& console_;
  const LaunchPlan& plan_;
  std::optional<store::Server> store_;
  WorkerGroup group_;
  SupervisorState policy_;
  GroupSignals signals_;
  int exit_code_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_supervisor(asio::io_context& io, Console& console, const LaunchPlan& plan,
                                        RunLogDir& logs, node::OrphanGuard& guard, std::string host) {
  return std::make_unique<Supervisor>(io, console, plan, logs, guard, std::move(host));
}

}  // namespace dtl::launcher
