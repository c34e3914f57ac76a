#include "fanout/slurm_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <iostream>

#include "base/text.h"
#include "base/printable.h"

namespace dtl::fanout {
using config::Setting;
namespace {

/// The fewest CPUs any node of the job has, from SLURM_JOB_CPUS_PER_NODE ("72(x2),36"); 0 if unreadable.
long fewest_cpus(const std::string& compressed) {
  long fewest = 0;
  for (const auto& item : text::split(compressed, ',')) {
    auto n = text::to_long(item.substr(0, item.find('(')));
    if (!n || *n <= 0) return 0;
    fewest = fewest ? std::min(fewest, *n) : *n;
  }
  return fewest;
}

}  // namespace

Result<std::vector<std::string>> srun_command(const std::vector<std::string>& args, const config::LaunchOptions& o,
                                              const EnvLookup& env, const std::string& self) {
  const std::string named = o.named(Setting::launcher, o.launcher);
  auto job = env("SLURM_JOB_ID");
  if (!job) {
    return fail(named + ": not inside a Slurm allocation (SLURM_JOB_ID is unset); run it in an sbatch script or a "
                "salloc shell");
  }
  if (auto step = env("SLURM_STEP_ID")) {
    return fail(named + ": already inside srun step " + printable(*job + "." + *step) +
                ", where each task is a node's agent; drop --launcher");
  }
  if (o.source(Setting::node_rank).kind != config::Source::Kind::default_) {
    return fail(o.named(Setting::node_rank, std::to_string(o.node_rank)) + " with " + named +
                ": srun gives each node its rank");
  }
  std::string nodes = env("SLURM_JOB_NUM_NODES").value_or(env("SLURM_NNODES").value_or(""));
  if (o.source(Setting::nnodes).kind != config::Source::Kind::default_ && o.min_nodes == o.max_nodes) {
    nodes = std::to_string(o.max_nodes);
  }
  // The program and its arguments end `args`; --launcher goes from the options before them.
  const size_t program = args.size() - o.program_args.size() - 1;
  std::vector<std::string> command{"srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"};
  // --ntasks as well: srun reads the allocation's SLURM_NTASKS (`sbatch --ntasks-per-node=8`: 8 per
  // node), and then ignores --ntasks-per-node=1.
  if (!nodes.empty()) command.insert(command.end(), {"--nodes=" + nodes, "--ntasks=" + nodes});
  // Since 22.05 a step's task gets one CPU unless told (srun no longer inherits --cpus-per-task):
  // the agent and its workers get the node's CPUs, unless SRUN_CPUS_PER_TASK says otherwise.
  const long cpus = fewest_cpus(env("SLURM_JOB_CPUS_PER_NODE").value_or(""));
  if (cpus > 0 && !env("SRUN_CPUS_PER_TASK")) command.push_back("--cpus-per-task=" + std::to_string(cpus));
  command.push_back(self);
  for (size_t i = 0; i < program; ++i) {
    if (args[i] == "--launcher") {
      ++i;  // and its value
    } else if (args[i].rfind("--launcher=", 0) != 0 && args[i] != "--") {
      command.push_back(args[i]);
    }
  }
  command.push_back("--launcher=");
  command.push_back("--");
  command.insert(command.end(), args.begin() + static_cast<std::ptrdiff_t>(program), args.end());
  return command;
}

std::optional<int> start_through_launcher(const std::vector<std::string>& args, const config::LaunchOptions& o,
                                          const EnvLookup& env) {
  const auto report = [](const Error& e) {
    std::cerr << error_line(e);
    return e.exit_code;
  };
  if (o.launcher.empty() || o.fanout.agent) return std::nullopt;
  const std::string named = o.named(Setting::launcher, o.launcher);
  const Setting hosts = o.fanout.hostfile.empty() ? Setting::hosts : Setting::hostfile;
  if (o.launcher == "ssh") {
    if (o.fanout.wanted()) return std::nullopt;  // fanout/fanout.h
    return report(Error{named + ": needs the hosts, --hostfile FILE or --hosts h1:N,h2:N"});
  }
  if (o.fanout.wanted()) {
    return report(Error{named + " starts the allocation's nodes, and " +
                        o.named(hosts, hosts == Setting::hosts ? o.fanout.hosts : o.fanout.hostfile) +
                        " names others: drop one of them"});
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return report(Error{std::string("cannot find dtlaunch's own path: ") + std::strerror(errno), 1});
  auto command = srun_command(args, o, env, std::string(self, static_cast<size_t>(n)));
  if (!command) return report(command.error());
  std::vector<char*> argv;
  for (const auto& a : *command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  execvp(argv[0], argv.data());
  return report(Error{named + ": cannot run srun: " + std::strerror(errno), 1});
}

}  // namespace dtl::fanout
