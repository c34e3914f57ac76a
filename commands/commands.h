// `dtlaunch config ...`, `dtlaunch env` and `dtlaunch rdzv-server`: the subcommands, chosen by the
// first argument. They sit above config/ and launcher/ (GPU discovery, rendezvous options), so main
// only dispatches.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/command_line.h"

namespace dtl::commands {

/// Runs the subcommand that args[0] names; std::nullopt when it names none (a launch follows).
std::optional<int> run_subcommand(const std::vector<std::string>& args, const config::EnvLookup& env);

/// `dtlaunch config [default|show|validate FILE] [--config_file FILE] [--force] [--fake_gpus N]`.
int run_config(const std::vector<std::string>& args, const config::EnvLookup& env);

/// `dtlaunch env [flags]`: versions, machine, GPUs and the settings in effect, for a bug report.
int run_env(const std::vector<std::string>& args, const config::EnvLookup& env);

/// `dtlaunch rdzv-server [flags]`: the rendezvous on its own; runs until the job is over and returns
/// the job's exit code (2 for bad arguments).
int run_rdzv_server(const std::vector<std::string>& args, const config::EnvLookup& env);

}  // namespace dtl::commands
