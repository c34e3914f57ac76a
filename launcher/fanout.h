// Many nodes from one command: the launching dtlaunch starts one agent per host over OpenSSH's
// client (`ssh -o BatchMode=yes host 'cd DIR && exec dtlaunch fanout-node ARGS'`, all at once) and relays
// their output as whole lines, each with its host in front.
//
// The wire between the two sides is the ssh channel's standard input and output:
//   1. the node prints `dtlaunch-node VERSION ADDRESS...` (the preflight: the host is reachable, and
//      runs this dtlaunch; its addresses, as `hostname -I` lists them);
//   2. once every host has answered, the launcher sends the node's variables as NAME=VALUE\0 entries,
//      ended by an empty one: forwarded ones, the host's settings (PET_NODE_RANK, ...) and the job's
//      fresh token (DTLAUNCH_RDZV_TOKEN), so nothing secret is in any command line or remote `ps`;
//   3. the end of that input stops the node's workers: Ctrl-C here, a dropped connection, a killed ssh.
// The agents meet through dtlaunch's static, authenticated rendezvous on the first host (rank 0), at
// --master_addr, else at meeting_address().
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "config/command_line.h"
#include "config/launch_options.h"

namespace dtl::launcher {

class Console;

using Variables = std::vector<std::pair<std::string, std::string>>;

/// One host's agent: how ssh starts it, and what it is sent.
struct NodeStart {
  std::string host;                ///< as the user wrote it
  std::vector<std::string> argv;   ///< the ssh command line; argv[0] is the program
  Variables variables;             ///< the wire's step 2
};

struct FanoutPlan {
  std::vector<NodeStart> nodes;  ///< in node-rank order
  std::string ssh_path;          ///< argv[0], found on PATH
  std::vector<std::string> environment;  ///< ssh's: this process's, as the inputs had it
  double stop_timeout_s = 30;    ///< how long the nodes may take to stop before ssh is killed
  /// No --master_addr: PET_MASTER_ADDR is meeting_address() of the first host, known at its hello.
  bool master_from_first_host = false;
};

/// What the plan is made from, besides the options: all read by the caller.
struct FanoutInputs {
  std::vector<std::string> args;  ///< dtlaunch's arguments as typed (argv without argv[0])
  std::vector<std::string> environment;  ///< this process's "NAME=VALUE" entries
  std::string cwd;
  std::string hostfile_text;          ///< the contents of o.fanout.hostfile, when set
  /// Files of NAME=VALUE lines for every host, as (path, contents), in order (a later one wins):
  /// env_file_paths' that exist.
  std::vector<std::pair<std::string, std::string>> env_files;
  std::string token;                  ///< the job's fresh secret
  /// Finds a program as execvp would (the ssh of --ssh_command).
  std::function<std::optional<std::string>(const std::string&)> find_program;
};

/// The files whose NAME=VALUE lines every host gets, in order: with deepspeed_runner,
/// $HOME/NAME and ./NAME where NAME is $DS_ENV_FILE or .deepspeed_env (deepspeed's runner's
/// DEEPSPEED_ENVIRONMENT_PATHS); then ./.dtlaunch_env. Relative to `cwd`.
std::vector<std::string> env_file_paths(const config::LaunchOptions& o, const config::EnvLookup& env,
                                        const std::string& cwd);

/// This process's environment, as "NAME=VALUE" entries.
std::vector<std::string> environment_entries();

/// Pure: every host's agent. Errors (exit 2) name the flag, variable or file:line at fault.
std::variant<FanoutPlan, Error> plan_fanout(const config::LaunchOptions& o, const FanoutInputs& in);

/// The variables the fan-out sets for one host's agent alone (its rank, the master, the token...):
/// the agent reads them and removes them, so its workers, and a launcher they start, never see them.
const std::vector<std::string>& host_setting_names();

/// A run without hosts to start: the fan-out's settings that would be silently ignored (a filter,
/// a host list given empty) are an Error (exit 2) naming where they came from.
std::optional<Error> refuse_fanout_settings_without_hosts(const config::LaunchOptions& o);

/// The first line a node prints: the hello word, this dtlaunch's version, then `addresses`.
std::string node_hello(const std::vector<std::string>& addresses);
struct Hello {
  std::string version;
  std::vector<std::string> addresses;
};
/// A node's first line; nullopt when it is no hello at all.
std::optional<Hello> parse_hello(std::string_view line);
/// Where the hosts meet without --master_addr: the first host as written (less any `user@`) when it
/// is an IP address; else the first address it reported, as deepspeed's runner takes the first of
/// `ssh host hostname -I` (a name from the launching side's ssh config, or its DNS, may mean
/// nothing to the other hosts); else its name.
std::string meeting_address(const std::string& first_host, const std::vector<std::string>& reported);
/// The wire's step 2 for `vars`.
std::string encode_variables(const Variables& vars);
/// Reads step 2 from `fd` (blocking, at most 1 MiB); nullopt when the input ends first or is malformed.
std::optional<Variables> read_variables(int fd);

/// `s` quoted for a POSIX shell ('...', with ' as '\'').
std::string shell_quote(const std::string& s);

/// Runs the plan: starts every host's agent, relays their output to `console`, stops them all on
/// SIGINT, SIGTERM or SIGHUP, and returns the job's exit code (the root cause's, as the first host's
/// agent reports it), or a preflight failure's after printing it.
int run_fanout(const FanoutPlan& plan, Console& console);

}  // namespace dtl::launcher
