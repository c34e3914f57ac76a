// The fan-out's plan: from the options and what this machine holds (the hostfile, the env files,
// the environment), every host's ssh command line and the variables its agent is sent. The hosts
// meet through dtlaunch's static, authenticated rendezvous on the first host (rank 0), at
// --master_addr, else at meeting_address() (fanout/fanout_wire.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "config/launch_options.h"
#include "fanout/fanout_wire.h"

namespace dtl::fanout {

/// One host's agent: how ssh starts it, and what it is sent.
struct NodeStart {
  std::string host;               ///< as the user wrote it
  std::vector<std::string> argv;  ///< the ssh command line; argv[0] is the program
  Variables variables;            ///< the wire's step 2: forwarded ones, the host's settings, the token
};

struct FanoutPlan {
  std::vector<NodeStart> nodes;          ///< in node-rank order
  std::string ssh_path;                  ///< argv[0], found on PATH
  std::string remote_dtlaunch;           ///< the hosts' dtlaunch, as --remote_dtlaunch names it
  std::vector<std::string> environment;  ///< ssh's: this process's, as the inputs had it
  double stop_timeout_s = 30;            ///< how long the nodes may take to stop before ssh is killed
  /// No --master_addr: PET_MASTER_ADDR is meeting_address() of the first host, known at its hello.
  bool master_from_first_host = false;
};

/// What the plan is made from, besides the options.
struct FanoutInputs {
  std::vector<std::string> args;         ///< dtlaunch's arguments as typed (argv without argv[0])
  std::vector<std::string> environment;  ///< this process's "NAME=VALUE" entries
  std::string cwd;
  std::string hostfile_text;  ///< the contents of o.fanout.hostfile, when set
  /// Files of NAME=VALUE lines for every host, as (path, contents), in order (a later one wins):
  /// env_file_paths' that exist.
  std::vector<std::pair<std::string, std::string>> env_files;
  std::string token;  ///< the job's fresh secret
  /// Finds a program as execvp would (the ssh of --ssh_command).
  std::function<std::optional<std::string>(const std::string&)> find_program;
};

/// Reads the inputs from this machine: its environment and working directory, the hostfile, the env
/// files, and a fresh token from OpenSSL. A hostfile that cannot be read is an Error (exit 2).
Result<FanoutInputs> read_fanout_inputs(const config::LaunchOptions& o, const std::vector<std::string>& args,
                                        const EnvLookup& env);

/// The files whose NAME=VALUE lines every host gets, in order: with deepspeed_runner,
/// $HOME/NAME and ./NAME where NAME is $DS_ENV_FILE or .deepspeed_env (deepspeed's runner's
/// DEEPSPEED_ENVIRONMENT_PATHS); then ./.dtlaunch_env. Relative to `cwd`.
std::vector<std::string> env_file_paths(const config::LaunchOptions& o, const EnvLookup& env, const std::string& cwd);

/// This process's environment, as "NAME=VALUE" entries.
std::vector<std::string> environment_entries();

/// Pure: every host's agent. Errors (exit 2) name the flag, variable or file:line at fault.
Result<FanoutPlan> plan_fanout(const config::LaunchOptions& o, const FanoutInputs& in);

/// The variables the fan-out sets for one host's agent alone (its rank, the master, the token...):
/// the agent reads them and removes them, so its workers, and a launcher they start, never see them.
const std::vector<std::string>& host_setting_names();

}  // namespace dtl::fanout
