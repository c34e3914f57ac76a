#include "agent/elastic_agent.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/posix.h"
#include "agent/agent_state.h"
#include "launcher/failure_summary.h"
#include "launcher/group_signals.h"
#include "watch/hang_watch.h"
#include "watch/live_figures.h"
#include "launcher/worker_group.h"
#include "rendezvous/ports.h"
#include "agent/shared_port.h"
#include "store/server.h"

namespace dtl::agent {
namespace asio = boost::asio;
namespace rdzv = dtl::rendezvous;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

/// The event loop's side of AgentState: sockets, signals, timers and the worker group feed it
/// events, and its actions are carried out here.
class ElasticAgent final : public launcher::Runner {
 public:
  ElasticAgent(asio::io_context& io, launcher::Console& console, const launcher::LaunchPlan& plan, launcher::RunLogDir& logs, node::OrphanGuard& guard,
               AgentOptions opts)
      : io(io),
        console(console),
        plan(plan),
        opts(std::move(opts)),
        state({plan.group, plan.nproc, this->opts.client.join.host, this->opts.exit_barrier_timeout,
               this->opts.client.host, this->opts.client.port}),
        barrier_timer(io),
        drain_timer(io),
        group(io, console, plan, logs, guard,
              {[this](const std::vector<Failure>& f) { apply(state.on_workers_failed(f)); },
               [this](const launcher::Group::Result& r) { apply(state.on_group_finished(r, wall_now_ns())); }}),
        signals(io, plan.signals, group, [this](int sig) { apply(state.on_signal(sig)); }) {}

  Result<int> run() override {
    if (opts.server) {
      if (auto hosted = host_rendezvous(); !hosted) return tl::unexpected(hosted.error());
    }
    if (const auto& m = plan.metrics) {
      if (auto served = group.live().serve_metrics(m->addr, m->port, m->called); !served) {
        return tl::unexpected(served.error());
      }
    }
    rdzv::Client::Callbacks callbacks{
        [this](const rdzv::Round& r) { apply(state.on_round(r)); }, [this](const rdzv::Stop& s) { apply(state.on_stop(s)); },
        [this](const rdzv::Exit& e) { apply(state.on_exit(e)); },
        [this](const std::string& why, bool refused) { apply(state.on_error(why, refused)); },
        {}, {}, {}, {}};  // the stacks' and the verdict's, set below
    // Every node's stacks: this node's part when the server asks, and the parts of what it asked for.
    callbacks.on_stacks_ask = [this](const rdzv::StacksAsk& a) {
      auto send = [this, id = a.id](std::string part) {
        if (client) client->send(rdzv::StacksPart{id, std::move(part)});
      };
      if (a.kind == rdzv::kGatherRanks) return group.live().part(rdzv::kMaxStacksText, send);
      group.hangs().part(rdzv::kMaxStacksText, send);
    };
    callbacks.on_stacks_part = [this](const rdzv::StacksPart& p) {
      if (auto g = gathers.find(p.id); g != gathers.end()) g->second.parts.push_back(p.part);
    };
    callbacks.on_stacks_end = [this](const rdzv::StacksEnd& e) {
      auto g = gathers.find(e.id);
      if (g == gathers.end()) return;
      auto gather = std::move(g->second);
      gathers.erase(g);
      gather.done(gather.parts, e.missing);
    };
    callbacks.on_hang_verdict = [this](const rdzv::HangVerdict& v) { group.hangs().verdict(v.rank, v.message); };
    client = std::make_unique<rdzv::Client>(io, opts.client, std::move(callbacks));
    client->start();
    io.run();
    return state.exit_code();
  }
  bool wrote_log_files() const override { return group.wrote_log_files(); }

 private:
  asio::io_context& io;
  launcher::Console& console;
  const launcher::LaunchPlan& plan;
  AgentOptions opts;
  AgentState state;
  asio::steady_timer barrier_timer;
  asio::steady_timer drain_timer;
  launcher::WorkerGroup group;
  launcher::GroupSignals signals;
  std::unique_ptr<store::Server> store;  ///< the workers' store, on the rendezvous's port
  std::unique_ptr<rdzv::Server> server;
  std::unique_ptr<rdzv::Client> client;
  /// `dtlaunch stacks` on this node of a job of several: every node's parts, by this node's ask id.
  struct Gather {
    std::vector<std::string> parts;
    std::function<void(const std::vector<std::string>&, const std::string&)> done;
  };
  std::map<uint32_t, Gather> gathers;
  uint32_t next_gather = 1;
  bool ending = false;    ///< end_job ran
  bool told_interface = false;
  std::string leave_why;  ///< Leave's, for the job's end when this node hosts it

  static int64_t wall_now_ns() {
    return duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  /// Starts the rendezvous server this node hosts; fails (exit code 2) when that is bad input
  /// (nothing has started yet).
  Status host_rendezvous() {
    // One descriptor per node, and the store sizes its connection cap from the limit: raised
    // before either starts. The workers get the limit back (spawn.cc).
    posix::raise_fd_limit();
    // A hang's report for the whole job is made here, from every node's part.
    opts.server->on_hang_stacks = [this](std::vector<std::string> parts, const std::string& missing) {
      group.hangs().job_report(parts, missing, [this](watch::HangWatch::Verdict verdict) {
        if (verdict && server) server->announce(rdzv::HangVerdict{verdict->first, verdict->second});
      });
    };
    if (plan.group.agent_store) {
      store = std::make_unique<store::Server>(io);
      share_port_with_store(*opts.server, *store);
      group.watch_store(*store);
    }
    try {
      server = std::make_unique<rdzv::Server>(io, *opts.server);
      spdlog::info("hosting the rendezvous on {}:{}", opts.server->host, server->port());
    } catch (const rdzv::PortInUse& e) {
      if (!opts.host_if_free) {
        const bool is_static = opts.server->round.static_backend;
        std::string msg = is_static ? opts.names.given(opts.server->port) + " is already in use on " +
                                          opts.server->host + ": is another node 0 of this job running?"
                                    : e.what();
        return fail(msg);
      }
      spdlog::info("the rendezvous on {}:{} is hosted by another agent on this machine", opts.server->host,
                   opts.server->port);
    } catch (const std::runtime_error& e) {
      // an address that does not resolve or is not this machine's: bad input, nothing started
      return fail(e.what());
    }
    return {};
  }

  void apply(const AgentState::Actions& actions) {
    for (const auto& action : actions) std::visit([this](const auto& a) { act(a); }, action);
  }

  void act(const action::Log& a) {
    const auto level = a.level == action::Level::info   ? spdlog::level::info
                       : a.level == action::Level::warn ? spdlog::level::warn
                                                       : spdlog::level::err;
    spdlog::log(level, "{}", a.text);
  }
  void act(const action::StartGroup& a) {
    // A round of several nodes: the hang report and `dtlaunch stacks` cover them all.
    if (a.env.group_world_size > 1) {
      group.hangs().job_wide(watch::HangWatch::JobWide{
          [this] {
            if (client) client->send(rdzv::StacksWanted{0, rdzv::kGatherHang});
          },
          [this](std::function<void(const std::vector<std::string>&, const std::string&)> done) {
            gather(rdzv::kGatherStacks, std::move(done));
          }});
      group.live().job_wide([this](std::function<void(const std::vector<std::string>&, const std::string&)> done) {
        gather(rdzv::kGatherRanks, std::move(done));
      });
    } else {
      group.hangs().job_wide(std::nullopt);
      group.live().job_wide(std::nullopt);
    }
    group.start(with_gloo_interface(a.env));
  }

  /// Every node's part of `kind` through the rendezvous, for this node's `dtlaunch stacks` or `top`.
  void gather(rdzv::Gather kind, std::function<void(const std::vector<std::string>&, const std::string&)> done) {
    if (!client) return done({}, "every node (no rendezvous)");
    const uint32_t id = next_gather++;
    gathers[id] = Gather{{}, std::move(done)};
    client->send(rdzv::StacksWanted{id, kind});
  }

  /// A job across hosts whose user named no interface for gloo: its traffic goes out through the
  /// interface that reaches the rendezvous. Without it gloo advertises the address the host name
  /// resolves to, 127.0.0.1 in most containers and network namespaces, and the other hosts' connects
  /// are refused (torchrun's workers fail so). NCCL picks its own interfaces, not by the host name.
  launcher::GroupEnv with_gloo_interface(launcher::GroupEnv env) {
    if (env.group_world_size < 2 || std::getenv("GLOO_SOCKET_IFNAME")) return env;
    for (const auto& [name, value] : env.variables) {
      if (name == "GLOO_SOCKET_IFNAME") return env;
    }
    const std::string address = client ? client->local_address() : "";
    // Reached through loopback, every node is on this machine, where gloo's own choice works.
    boost::system::error_code ec;
    if (address.empty() || boost::asio::ip::make_address(address, ec).is_loopback() || ec) return env;
    const std::string interface = posix::interface_of(address);
    if (interface.empty()) return env;
    env.variables.emplace_back("GLOO_SOCKET_IFNAME", interface);
    if (!told_interface) {
      spdlog::info("the workers' gloo traffic goes through {} ({}), which reaches the rendezvous "
                   "(set GLOO_SOCKET_IFNAME to choose another)", interface, address);
      told_interface = true;
    }
    return env;
  }
  void act(const action::StopGroup& a) { group.stop(a.signal); }
  void act(const action::KillGroup&) { group.kill(); }
  void act(const action::Send& a) { client->send(a.message); }
  void act(const action::CloseClient& c) { client->leave(rdzv::Leaving{c.reason}); }
  void act(const action::ArmBarrier& a) {
    barrier_timer.expires_after(a.timeout);
    barrier_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) apply(state.on_barrier_timeout());
    });
  }
  void act(const action::CancelBarrier&) { barrier_timer.cancel(); }
  void act(const action::Summary& a) {
    // a lost node's report is made by the server, which has no wall clock time for it
    auto failures = a.failures;
    const int64_t now_s = wall_now_ns() / 1000000000;
    for (auto& f : failures) {
      if (f.timestamp_s == 0) f.timestamp_s = now_s;
    }
    console.write(2, "\n" + launcher::format_summary(plan.title, failures, opts.client.join.host) + "\n");
  }
  void act(const action::Leave& a) {
    barrier_timer.cancel();
    leave_why = a.why;
    // This node's last word to the rendezvous (why it leaves) goes out before the loop stops; a hosting
    // node's own server reads it too, so the others hear that reason rather than the host's leaving.
    drain_timer.expires_after(std::chrono::seconds(1));
    drain_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) end_job();
    });
    client->after_last_word([this] { end_job(); });
  }

  void end_job() {
    if (std::exchange(ending, true)) return;
    drain_timer.cancel();
    if (!server) return finish();
    // The other nodes must get their Exit before the server goes: wait for them to hang up.
    server->end_job("the node hosting the rendezvous (" + opts.client.join.host + ") left" +
                    (leave_why.empty() ? "" : ": " + leave_why));
    server->when_empty([this] { finish(); });
    drain_timer.expires_after(std::chrono::seconds(5));
    drain_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      spdlog::warn("rendezvous: {} node(s) still connected 5s after the end; leaving", server->connections());
      finish();
    });
  }

  void finish() {
    signals.cancel();
    barrier_timer.cancel();
    drain_timer.cancel();
    io.stop();
  }
};

}  // namespace

std::unique_ptr<launcher::Runner> make_elastic_agent(asio::io_context& io, launcher::Console& console, const launcher::LaunchPlan& plan,
                                           launcher::RunLogDir& logs, node::OrphanGuard& guard, AgentOptions options) {
  return std::make_unique<ElasticAgent>(io, console, plan, logs, guard, std::move(options));
}

}  // namespace dtl::agent
