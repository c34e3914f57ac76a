// `dtlaunch config ...`, `env`, `rdzv-server` and `completion`: the subcommands, chosen by the
// first argument. They sit above config/ and launcher/ (GPU discovery, rendezvous options), so main
// only dispatches.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/command_line.h"

namespace dtl::commands {

/// One subcommand: its name, what runs it, and what the man page and completion say of it.
struct Subcommand {
  const char* name;
  int (*run)(const std::vector<std::string>& args, const EnvLookup& env);
  const char* summary;  ///< one line, for the man page
  const char* words;    ///< what may follow the name, for completion ("default show validate")
};

/// Every subcommand, in the order the man page lists them.
const std::vector<Subcommand>& subcommands();

/// Runs the subcommand that args[0] names; std::nullopt when it names none (a launch follows).
std::optional<int> run_subcommand(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch config [default|show|validate FILE] [--config_file FILE] [--force] [--fake_gpus N]`.
int run_config(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch env [flags]`: versions, machine, GPUs and the settings in effect, for a bug report.
int run_env(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch rdzv-server [flags]`: the rendezvous on its own; runs until the job is over and returns
/// the job's exit code (2 for bad arguments).
int run_rdzv_server(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch stacks [PID]`: every rank's stack of a running job of this user on this machine.
int run_stacks(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch top [PID] [--json] [--once]`: every rank of a running job of this user, live.
int run_top(const std::vector<std::string>& args, const EnvLookup& env);

/// `dtlaunch completion bash|zsh|man`: shell completion or the man page, from the flag table.
int run_completion(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace dtl::commands
