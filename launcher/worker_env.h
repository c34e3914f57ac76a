// torchrun's worker environment contract, as a pure function: what dtlaunch sets for each worker on
// top of the environment it inherited.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "config/launch_options.h"

namespace dtl::launcher {

/// What all workers of one attempt share.
struct GroupEnv {
  std::string role = "default";
  int local_world_size = 1;
  int world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int base_rank = 0;  ///< global rank of this node's local rank 0
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  ///< TORCHELASTIC_USE_AGENT_STORE: the agent serves the store at master
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  ///< TORCHELASTIC_SIGNALS_TO_HANDLE
  bool virtual_local_rank = false;  ///< LOCAL_RANK=0 for every worker
  bool deepspeed_variables = false;  ///< CROSS_RANK, CROSS_SIZE, LOCAL_SIZE (deepspeed's launcher)
  /// torchrun's variables; false for accelerate's simple launcher with one process, whose worker
  /// gets `variables` (and its GPUs) only.
  bool torchrun_contract = true;
  /// The config file's env: entries and accelerate's variables, as if inherited: torchrun's
  /// variables above win over them.
  EnvPairs variables;
};

/// What differs per worker.
struct WorkerSlot {
  int local_rank = 0;
  std::string error_file;
  std::optional<std::string> cuda_visible_devices;  ///< unset: inherited value left alone
};

/// The variables dtlaunch sets (overriding inherited ones): the group's `variables`, then torchrun's.
/// OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING are only set when neither inherited nor
/// among the group's variables.
EnvPairs worker_env(const GroupEnv& group, const WorkerSlot& slot, const EnvLookup& inherited);

/// The full "KEY=VALUE" environment for execve: `inherited` (environ-style) without the `withheld`
/// variables (dtlaunch's secrets), with `overlay` on top.
std::vector<std::string> merge_environ(char* const* inherited, const EnvPairs& overlay,
                                       const std::vector<std::string>& withheld = {});

}  // namespace dtl::launcher
