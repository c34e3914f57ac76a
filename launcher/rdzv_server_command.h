// `dtlaunch rdzv-server`: the rendezvous on its own, for clusters where no training node should
// host it. Agents reach it with --rdzv_endpoint and --rdzv_conf is_host=0.
#pragma once

#include <string>
#include <vector>

#include "config/command_line.h"

namespace dtl::launcher {

/// Runs until the job is over; returns the job's exit code (2 for bad arguments).
int run_rdzv_server_command(const std::vector<std::string>& args, const config::EnvLookup& env);

}  // namespace dtl::launcher
