// dtlaunch: torchrun's command line, an event-driven supervisor underneath. This file only wires
// the libraries together: parse, look at the machine, plan, supervise.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "commands/commands.h"
#include "config/command_line.h"
#include "launcher/gpus.h"
#include "launcher/log_layout.h"
#include "launcher/orphan_guard.h"
#include "launcher/plan.h"
#include "launcher/supervisor.h"
#include "rendezvous/ports.h"

namespace {

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void setup_logging() {
  auto logger = spdlog::stderr_logger_st("dtlaunch");
  logger->set_pattern("dtlaunch: %l: %v");
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtl;
  auto env = config::process_env();
  if (auto code = commands::run_subcommand(std::vector<std::string>(argv + 1, argv + argc), env)) return *code;
  auto parsed = config::parse_command_line(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!parsed.options) {
    for (const auto& w : parsed.warnings) std::cerr << "dtlaunch: warning: " << w << "\n";
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output << (parsed.output.ends_with('\n') ? "" : "\n");
    return parsed.exit_code;
  }
  const config::LaunchOptions& options = *parsed.options;
  setup_logging();
  for (const auto& w : parsed.warnings) spdlog::warn("{}", w);
  // The config file's env: entries and accelerate's variables: inherited by the workers like the rest.
  for (const auto& [name, value] : config::worker_variables(options)) setenv(name.c_str(), value.c_str(), 1);

  // Orphans of workers come to dtlaunch, which stops them; the guard covers a SIGKILLed dtlaunch.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // A console that went away (`dtlaunch ... | head`) must not kill the job: its output is dropped.
  signal(SIGPIPE, SIG_IGN);
  try {
    launcher::HostFacts host{options.use_cpu ? launcher::GpuInventory{{}, "none"} : launcher::discover_gpus(options.fake_gpus),
                             cpu_count(), env,
                             rendezvous::reserve_check};
    auto planned = launcher::make_plan(options, host);
    if (auto* err = std::get_if<launcher::PlanError>(&planned)) {
      std::cerr << err->message << "\n";
      return err->exit_code;
    }
    const auto& plan = std::get<launcher::LaunchPlan>(planned);
    for (const auto& notice : plan.notices) {
      if (notice.rfind("warning: ", 0) == 0) {
        spdlog::warn("{}", notice.substr(9));
      } else {
        spdlog::info("{}", notice);
      }
    }

    launcher::OrphanGuard guard;
    launcher::RunLogDir logs(plan.log_dir, plan.group.run_id);
    boost::asio::io_context io;
    launcher::Supervisor supervisor(io, plan, logs, guard);
    int code = supervisor.run();
    const bool keep = !plan.log_dir.empty() || supervisor.wrote_log_files();
    if (keep && logs.temporary()) spdlog::info("per-rank logs are in {}", logs.path().string());
    logs.finish(keep);
    return code;
  } catch (const std::exception& e) {
    std::cerr << "dtlaunch: error: " << e.what() << "\n";
    return 1;
  }
}
