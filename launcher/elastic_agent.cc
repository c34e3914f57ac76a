#include "launcher/elastic_agent.h"

#include <signal.h>
#include <unistd.h>

#include <random>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "launcher/failure.h"
#include "launcher/posix_io.h"
#include "launcher/worker_group.h"
#include "rendezvous/ports.h"

namespace dtl::launcher {
namespace asio = boost::asio;
namespace rdzv = dtl::rendezvous;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

rdzv::FailureReport to_report(const WorkerFailure& f, const std::string& host) {
  rdzv::FailureReport r;
  r.rank = f.rank;
  r.local_rank = f.local_rank;
  r.pid = f.pid;
  r.exitcode = f.exitcode;
  r.observed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(f.observed.time_since_epoch()).count();
  r.timestamp_s = f.timestamp;
  r.host = host;
  r.error_file = f.error_file;
  r.message = f.message;
  return r;
}

WorkerFailure from_report(const rdzv::FailureReport& r) {
  WorkerFailure f;
  // a lost node's report is made by the server, which has no wall clock time for it
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  f.rank = r.rank;
  f.local_rank = r.local_rank;
  f.pid = r.pid;
  f.exitcode = r.exitcode;
  f.observed = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(r.observed_ns)));
  f.timestamp = r.timestamp_s ? r.timestamp_s : now_s;
  f.host = r.host;
  f.error_file = r.error_file;
  f.message = r.message;
  return f;
}

}  // namespace

struct ElasticAgent::Impl {
  Impl(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs, OrphanGuard& guard,
       AgentOptions opts)
      : io(io),
        console(console),
        plan(plan),
        opts(std::move(opts)),
        host(host_name()),
        signals(io),
        barrier_timer(io),
        group(io, console, plan, logs, guard,
              {[this](const std::vector<WorkerFailure>& f) { on_failure(f); },
               [this](const WorkerGroup::Result& r) { on_finished(r); }}) {}

  asio::io_context& io;
  Console& console;
  const LaunchPlan& plan;
  AgentOptions opts;
  std::string host;
  asio::signal_set signals;
  asio::steady_timer barrier_timer;
  WorkerGroup group;
  std::unique_ptr<rdzv::Server> server;
  std::unique_ptr<rdzv::Client> client;

  std::optional<rdzv::Round> round;
  bool settled = true;            ///< this round's Done or Stopped went out
  bool stop_asked = false;        ///< the server asked this node to stop its workers
  std::optional<rdzv::Exit> exit_msg;
  std::optional<std::string> error;
  int error_code = 1;
  int stop_signal = 0;
  int exit_code = 0;
  bool leaving = false;

  int run() {
    signals.add(SIGCHLD);
    for (int sig : plan.signals) signals.add(sig);
    wait_signal();
    if (opts.server) {
      try {
        server = std::make_unique<rdzv::Server>(io, *opts.server);
        spdlog::info("hosting the rendezvous on {}:{}", opts.server->host, server->port());
      } catch (const rdzv::PortInUse& e) {
        if (!opts.host_if_free) {
          const bool is_static = opts.server->round.static_backend;
          std::string msg = is_static ? "--master_port " + std::to_string(opts.server->port) + " is already in use on " +
                                            opts.server->host + ": is another node 0 of this job running?"
                                      : e.what();
          console.write(2, "dtlaunch: error: " + msg + "\n");  // after what is queued already
          return 2;
        }
        spdlog::info("the rendezvous on {}:{} is hosted by another agent on this machine", opts.server->host,
                     opts.server->port);
      } catch (const std::runtime_error& e) {
        // an address that does not resolve or is not this machine's: bad input, nothing started
        console.write(2, std::string("dtlaunch: error: ") + e.what() + "\n");
        return 2;
      }
    }
    client = std::make_unique<rdzv::Client>(
        io, opts.client,
        rdzv::Client::Callbacks{[this](const rdzv::Round& r) { on_round(r); },
                                [this](const rdzv::Stop& s) { on_stop(s); },
                                [this](const rdzv::Exit& e) { on_exit(e); },
                                [this](const std::string& why, bool refused) { on_error(why, refused); }});
    client->start();
    io.run();
    return exit_code;
  }

  void wait_signal() {
    signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        group.reap();
      } else if (stop_signal == 0) {
        spdlog::warn("received {}, stopping the workers and leaving the job", signal_name(sig));
        stop_signal = sig;
        client->close();  // the server sees this node leave
        settle_or_leave(sig);
      } else {
        spdlog::warn("received {} while stopping: killing the workers now", signal_name(sig));
        group.kill();
      }
      wait_signal();
    });
  }

  void on_round(const rdzv::Round& r) {
    barrier_timer.cancel();  // a node that finished runs again when another node's failure restarts the group
    round = r;
    settled = false;
    stop_asked = false;
    GroupEnv env = plan.group;
    env.group_rank = r.group_rank;
    env.group_world_size = r.group_world_size;
    env.base_rank = r.base_rank;
    env.world_size = r.world_size;
    env.master_addr = r.master_addr;
    env.master_port = r.master_port;
    env.restart_count = r.restart_count;
    spdlog::info("round {}: node {} of {}, ranks {}..{} of {}, master {}:{}, restart {}", r.round, r.group_rank,
                 r.group_world_size, r.base_rank, r.base_rank + plan.nproc - 1, r.world_size, r.master_addr,
                 r.master_port, r.restart_count);
    group.start(env);
  }

  void on_failure(const std::vector<WorkerFailure>& failures) {
    rdzv::Failed msg;
    for (const auto& f : failures) msg.failures.push_back(to_report(f, host));
    client->send(msg);
  }

  void on_finished(const WorkerGroup::Result& result) {
    if (leaving) return;
    if (exit_msg || error || stop_signal) return leave();
    if (result.start_failed) {
      rdzv::FailureReport r;
      r.host = host;
      r.rank = round ? round->base_rank : -1;
      r.local_rank = -1;
      r.message = "dtlaunch could not start the workers";
      r.observed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
      client->send(rdzv::Failed{{r}});
    }
    settled = true;
    if (!result.failures.empty() || result.start_failed || stop_asked) {
      client->send(rdzv::Stopped{});
      return;
    }
    client->send(rdzv::Done{});
    barrier_timer.expires_after(opts.exit_barrier_timeout);
    barrier_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      spdlog::warn("the other nodes did not finish within {}s of this one; leaving", opts.exit_barrier_timeout.count());
      leave();
    });
  }

  void on_stop(const rdzv::Stop& s) {
    if (group.active()) {
      spdlog::warn("stopping the workers: {}", s.reason);
      stop_asked = true;
      group.stop(SIGTERM);
    } else if (!settled) {
      settled = true;
      client->send(rdzv::Stopped{});
    }
  }

  void on_exit(const rdzv::Exit& e) {
    exit_msg = e;
    barrier_timer.cancel();  // the exit barrier, if this node was waiting in it
    settle_or_leave(SIGTERM);
  }

  void on_error(const std::string& why, bool refused) {
    error = why;
    error_code = refused ? 2 : 1;
    settle_or_leave(SIGTERM);
  }

  /// Stops the workers if any run (leaving once they are gone), else leaves now.
  void settle_or_leave(int sig) {
    if (group.active()) {
      group.stop(sig);
    } else {
      leave();
    }
  }

  void leave() {
    if (leaving) return;
    leaving = true;
    if (exit_msg) {
      exit_code = exit_msg->code;
      if (exit_msg->code != 0) {
        const bool reporter = !round || round->group_rank == 0;
        if (reporter && !exit_msg->failures.empty()) {
          std::vector<WorkerFailure> failures;
          for (const auto& r : exit_msg->failures) failures.push_back(from_report(r));
          std::string text = "\n" + format_summary(plan.title, failures, host) + "\n";
          console.write(2, text);
        }
        spdlog::error("the job failed: {}", exit_msg->reason);
      }
    }
    if (error) {
      spdlog::error("rendezvous: {}", *error);
      exit_code = error_code;
    }
    if (stop_signal) exit_code = 128 + stop_signal;
    if (!server) return finish();
    // The other nodes must get their Exit before the server goes: wait for them to hang up.
    server->end_job("the node hosting the rendezvous (" + host + ") left");
    server->when_empty([this] { finish(); });
    barrier_timer.expires_after(std::chrono::seconds(5));
    barrier_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      spdlog::warn("rendezvous: {} node(s) still connected 5s after the end; leaving", server->connections());
      finish();
    });
  }

  void finish() {
    boost::system::error_code ignored;
    signals.cancel(ignored);
    barrier_timer.cancel();
    io.stop();
  }
};

ElasticAgent::ElasticAgent(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
                           OrphanGuard& guard, AgentOptions options)
    : impl_(std::make_unique<Impl>(io, console, plan, logs, guard, std::move(options))) {}
ElasticAgent::~ElasticAgent() = default;
int ElasticAgent::run() { return impl_->run(); }
bool ElasticAgent::wrote_log_files() const { return impl_->group.wrote_log_files(); }

}  // namespace dtl::launcher
