#include "commands/commands.h"

namespace dtl::commands {

std::optional<int> run_subcommand(const std::vector<std::string>& args, const config::EnvLookup& env) {
  using Run = int (*)(const std::vector<std::string>&, const config::EnvLookup&);
  static const std::pair<const char*, Run> kSubcommands[] = {
      {"config", run_config}, {"env", run_env}, {"rdzv-server", run_rdzv_server}};
  if (args.empty()) return std::nullopt;
  for (const auto& [name, run] : kSubcommands) {
    if (args[0] == name) return run(std::vector<std::string>(args.begin() + 1, args.end()), env);
  }
  return std::nullopt;
}

}  // namespace dtl::commands
