// dtlaunch: torchrun's command line, an event-driven supervisor underneath. This file only wires
// the libraries together: parse, look at the machine, plan, supervise.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <system_error>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "base/posix.h"
#include "commands/commands.h"
#include "config/command_line.h"
#include "launcher/console.h"
#include "agent/elastic_agent.h"
#include "fanout/fanout.h"
#include "node/gpus.h"
#include "launcher/log_layout.h"
#include "node/orphan_guard.h"
#include "launcher/plan.h"
#include "agent/rdzv_options.h"
#include "fanout/slurm_launch.h"
#include "launcher/supervisor.h"
#include "rendezvous/ports.h"

namespace {

using namespace dtl;

/// dtlaunch's messages: "dtlaunch: warning: ..." on stderr, through `sink` when given.
void setup_logging(std::shared_ptr<spdlog::sinks::sink> sink = nullptr) {
  auto logger = sink ? std::make_shared<spdlog::logger>("dtlaunch", std::move(sink))
                     : spdlog::stderr_logger_st("dtlaunch");
  logger->set_pattern("dtlaunch: %l: %v");
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

/// What a launch runs, once every check that can refuse it has passed.
struct Prepared {
  launcher::LaunchPlan plan;
  std::optional<agent::AgentOptions> agent;  ///< set: a node of a multi-node job
};

/// Looks at the machine and plans; a refusal is an Error, printed by the caller.
Result<Prepared> prepare(const config::LaunchOptions& options, const EnvLookup& env) {
  launcher::HostFacts host{
      options.use_cpu ? node::GpuInventory{{}, "none"} : node::discover_gpus(options.fake_gpus),
      posix::cpu_count(), env, [&](const std::string& addr, int port) {
        return rendezvous::reserve_check(addr, port, agent::port_names(options, config::Setting::master_addr, config::Setting::master_port));
      }};
  // For tests only: a fake NUMA topology (a directory holding sys/...) in place of the machine's /sys.
  if (auto root = env("DTL_TEST_SYSFS_ROOT")) host.read_sysfs = node::sysfs_under(*root);
  auto planned = launcher::make_plan(options, host);
  if (!planned) return tl::unexpected(planned.error());
  Prepared p{std::move(*planned), std::nullopt};
  for (const auto& notice : p.plan.notices) {
    if (notice.rfind("warning: ", 0) == 0) {
      spdlog::warn("{}", notice.substr(9));
    } else {
      spdlog::info("{}", notice);
    }
  }
  if (launcher::is_multi_node(options)) {
    auto made = agent::make_agent_options(options, p.plan, agent::this_host());
    if (!made) return tl::unexpected(made.error());
    for (const auto& w : made->warnings) spdlog::warn("{}", w);
    p.agent = made->options;
  }
  return p;
}

/// A fan-out's node: a signal the launcher passes on (fanout/fanout_wire.h) is raised here, where
/// the runner's handlers pass it to the workers; the end of `control` (the ssh channel's stdin) is a
/// SIGTERM, whatever closed it.
void stop_when_closed(boost::asio::posix::stream_descriptor& control) {
  static char buf[256];
  static std::string pending;
  control.async_read_some(boost::asio::buffer(buf), [&control](const boost::system::error_code& ec, size_t got) {
    if (ec != boost::asio::error::operation_aborted && ec) ::kill(::getpid(), SIGTERM);
    if (ec) return;
    for (int sig : fanout::decode_signals(pending, std::string_view(buf, got))) ::kill(::getpid(), sig);
    stop_when_closed(control);
  });
}

/// The run is over and its exit code decided: SIGINT, SIGTERM and SIGHUP stay pending from here
/// on (and are dropped at exit), so that one arriving during the teardown (srun's
/// --kill-on-bad-exit once another node left with the job's code, say) neither kills it halfway
/// nor turns the code into 128+N once the event loop's handlers are gone.
void hold_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
}

/// Runs the workers (the supervisor, or this node's agent) and keeps or removes the log folder.
int run(const Prepared& p, const std::string& node_name, int control_fd, launcher::Console& console,
        node::OrphanGuard& guard) {
  const auto report = [&](const Error& e) {
    console.write(2, error_line(e));
    return e.exit_code;
  };
  const launcher::LaunchPlan& plan = p.plan;
  std::optional<launcher::RunLogDir> run_logs;
  try {
    run_logs.emplace(plan.log_dir, plan.group.run_id, !plan.writes_log_files(), plan.log_dir_called);
  } catch (const std::system_error& e) {
    // A --log_dir that cannot be made is bad input (exit 2, nothing started); a full /tmp is not.
    return report(Error{e.what(), plan.log_dir.empty() ? 1 : 2});
  }
  launcher::RunLogDir& logs = *run_logs;
  // Should dtlaunch be SIGKILLed, the guard removes what only this run could have used.
  if (logs.temporary() && !plan.writes_log_files()) guard.remove_on_death(logs.root());
  boost::asio::io_context io;
  boost::asio::posix::stream_descriptor control(io);
  if (control_fd >= 0) {
    control.assign(control_fd);
    stop_when_closed(control);
  }
  auto runner = p.agent ? agent::make_elastic_agent(io, console, plan, logs, guard, *p.agent)
                        : launcher::make_supervisor(io, console, plan, logs, guard, node_name);
  auto ran = runner->run();  // an Error: refused before anything started (a port taken since the plan)
  const int code = ran ? *ran : report(ran.error());
  hold_stop_signals();
  const bool keep = !plan.log_dir.empty() || runner->wrote_log_files();
  if (keep && logs.temporary()) spdlog::info("per-rank logs are in {}", logs.path().string());
  if (keep) guard.remove_on_death("");
  logs.finish(keep);
  return code;
}

/// `dtlaunch --hostfile ...`: every host's agent over ssh, from here.
int fan_out(const config::LaunchOptions& o, const std::vector<std::string>& args, const EnvLookup& env) {
  auto planned = fanout::read_fanout_inputs(o, args, env).and_then(
      [&](const fanout::FanoutInputs& inputs) { return fanout::plan_fanout(o, inputs); });
  if (auto ready = planned.and_then(fanout::check_fanout_limits); !ready) {
    std::cerr << error_line(ready.error());
    return ready.error().exit_code;
  }
  const fanout::FanoutPlan& plan = *planned;
  launcher::Console console;
  setup_logging(console.sink());
  signal(SIGPIPE, SIG_IGN);
  try {
    return fanout::run_fanout(plan, console);
  } catch (const std::exception& e) {
    console.write(2, error_line(Error{e.what(), 1}));
    return 1;
  }
}

/// `dtlaunch fanout-node ARGS`, the fan-out's agent on each host: says hello, takes its variables (the
/// job's token among them) from stdin, and keeps stdin to learn when the launching side goes away.
/// Returns that control fd, or -1 when the input ended first.
int become_node() {
  const std::string hello = fanout::node_hello(getpid(), posix::host_addresses()) + "\n";
  if (!posix::write_all(1, hello)) return -1;
  auto vars = fanout::read_variables(0);
  if (!vars) return -1;
  for (const auto& [name, value] : *vars) setenv(name.c_str(), value.c_str(), 1);
  const int control = fcntl(0, F_DUPFD_CLOEXEC, 3);
  const int devnull = open("/dev/null", O_RDONLY);  // the workers' stdin: the channel is not theirs
  if (control < 0 || devnull < 0 || dup2(devnull, 0) < 0) return -1;
  close(devnull);
  return control;
}

}  // namespace

int main(int argc, char** argv) {
  // Started with 0, 1 or 2 closed (`dtlaunch ... >&-`), the next descriptors opened would land there:
  // the orphan guard's pipe (which the guard then closes with its stdin and stdout) or the event
  // loop's, which the console would then write into. /dev/null holds those places instead.
  for (int fd = 0; fd < 3; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) return 1;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  int control_fd = -1;
  if (!args.empty() && args[0] == "fanout-node") {
    if ((control_fd = become_node()) < 0) return 1;  // the launcher went away, or stopped the job before it began
    args.erase(args.begin());
  }
  auto env = process_env();
  setup_logging();
  if (control_fd < 0) {
    if (auto code = commands::run_subcommand(args, env)) return *code;
  }
  auto parsed = config::parse_command_line(args, env);
  if (!parsed) {
    std::cerr << error_line(parsed.error());
    return parsed.error().exit_code;
  }
  if (!parsed->options) {
    for (const auto& w : parsed->warnings) std::cerr << "dtlaunch: warning: " << w << "\n";
    std::cout << parsed->output << (parsed->output.ends_with('\n') ? "" : "\n");
    return 0;
  }
  parsed->options->fanout.agent = control_fd >= 0;
  if (control_fd >= 0) {
    for (const auto& name : fanout::host_setting_names()) unsetenv(name.c_str());  // read: not the workers'
  }
  // --launcher slurm: dtlaunch becomes srun, which starts every node's agent
  if (auto code = fanout::start_through_launcher(args, *parsed->options, env)) return *code;
  // A pre-emption warning before the workers exist has no one to tell (launcher/group_signals.h).
  for (int sig : {SIGUSR1, SIGUSR2}) signal(sig, SIG_IGN);
  if (parsed->options->fanout.wanted()) {
    for (const auto& w : parsed->warnings) std::cerr << "dtlaunch: warning: " << w << "\n";
    return fan_out(*parsed->options, args, env);
  }
  // The guard is forked while dtlaunch is still one thread: the process it becomes allocates.
  std::unique_ptr<node::OrphanGuard> guard;
  try {
    guard = std::make_unique<node::OrphanGuard>(parsed->options->job_cgroup);
  } catch (const std::exception& e) {
    std::cerr << error_line(Error{e.what(), 1});
    return 1;
  }
  // From here on everything dtlaunch and its workers print goes through the console's own thread,
  // so a console that stops reading cannot stall the event loop (signals, exits, the rendezvous).
  launcher::Console console;
  setup_logging(console.sink());
  for (const auto& w : parsed->warnings) spdlog::warn("{}", w);
  // Orphans of workers come to dtlaunch, which stops them; the guard covers a SIGKILLed dtlaunch.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // A console that went away (`dtlaunch ... | head`) must not kill the job: its output is dropped.
  signal(SIGPIPE, SIG_IGN);
  try {
    auto prepared = prepare(*parsed->options, env);
    if (!prepared) {
      console.write(2, error_line(prepared.error()));
      return prepared.error().exit_code;
    }
    const auto& o = *parsed->options;
    return run(*prepared, o.node_name.empty() ? posix::host_name() : o.node_name, control_fd,
               console, *guard);
  } catch (const std::exception& e) {
    console.write(2, error_line(Error{e.what(), 1}));
    return 1;
  }
}
