#include "commands/commands.h"

namespace dtl::commands {

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> kSubcommands = {
      {"config", run_config, "write a config file by answering questions; default, show, validate FILE",
       "default show validate"},
      {"env", run_env, "versions, OS, GPUs and the settings in effect, for a bug report", ""},
      {"rdzv-server", run_rdzv_server, "run a multi-node job's rendezvous on its own", ""},
      {"stacks", run_stacks, "print every rank's stack of a job running here, now; the job goes on", ""},
      {"top", run_top, "show every rank of a job running here, live: what it does, CPU, memory, GPU", "--json --once"},
      {"completion", run_completion, "print shell completion (bash, zsh) or the man page (man)", "bash zsh man"},
  };
  return kSubcommands;
}

std::optional<int> run_subcommand(const std::vector<std::string>& args, const EnvLookup& env) {
  if (args.empty()) return std::nullopt;
  for (const auto& s : subcommands()) {
    if (args[0] == s.name) return s.run(std::vector<std::string>(args.begin() + 1, args.end()), env);
  }
  return std::nullopt;
}

}  // namespace dtl::commands
