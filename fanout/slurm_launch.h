// `dtlaunch --launcher slurm ARGS` in an sbatch script or a salloc shell: dtlaunch becomes
// `srun --ntasks-per-node=1 ... dtlaunch ARGS`, one agent per node of the allocation, each of which
// takes its node's place from the step's variables (config/cluster_env.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/env.h"
#include "config/launch_options.h"

namespace dtl::fanout {

/// The srun command line for `args` (dtlaunch's arguments after argv[0], which parsed into `o`),
/// with `self` as the dtlaunch to run. Each agent gets `args` with `--launcher=` in place of the
/// user's --launcher, so that none starts srun again (whatever PET_LAUNCHER or the config file say).
/// An Error (exit 2) outside an allocation, inside a step, or with --node_rank.
Result<std::vector<std::string>> srun_command(const std::vector<std::string>& args, const config::LaunchOptions& o,
                                              const EnvLookup& env, const std::string& self);

/// `--launcher`: `slurm` runs srun in place of this process (srun then owns the terminal, the
/// signals and the exit code) and returns only on failure, with the exit code after printing why;
/// `ssh` is the fan-out that --hostfile/--hosts start (std::nullopt: go on), and needs them. Nothing
/// (std::nullopt) without --launcher, or in a fan-out's agent.
std::optional<int> start_through_launcher(const std::vector<std::string>& args, const config::LaunchOptions& o,
                                          const EnvLookup& env);

}  // namespace dtl::fanout
