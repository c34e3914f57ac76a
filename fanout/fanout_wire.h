// The wire between the fan-out's launcher and each host's `dtlaunch fanout-node`: the ssh channel's
// standard input and output.
//   1. the node prints `dtlaunch-node VERSION pid=PID ADDRESS...` (the preflight: the host is
//      reachable, and runs this dtlaunch; the agent's pid, by which `dtlaunch stacks` there names
//      it; its first addresses, as `hostname -I` lists them);
//   2. once every host has answered, the launcher sends the node's variables as NAME=VALUE\0 entries,
//      ended by an empty one;
//   3. then, on the same input, one line per signal passed on to the node's workers (`signal USR1`);
//      the end of that input stops the node's workers: Ctrl-C here, a dropped connection, a killed ssh.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtl::fanout {

using Variables = std::vector<std::pair<std::string, std::string>>;

/// The most bytes of a hello the launcher reads before its newline; node_hello stays under it.
inline constexpr size_t kMaxHelloBytes = 4096;

/// The first line a node prints: the hello word, this dtlaunch's version, `pid=` the agent's pid,
/// then as many of `addresses`, in order, as fit in 1 KiB (the launcher uses the first).
std::string node_hello(pid_t pid, const std::vector<std::string>& addresses);
struct Hello {
  std::string version;
  pid_t pid = 0;  ///< 0 when the node did not say
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

/// The signals the launcher passes on to every node (step 3): SIGUSR1 and SIGUSR2, which Slurm's
/// --signal and submitit send so that training code can checkpoint before it is pre-empted.
bool passed_on(int sig);
/// Step 3's line for `sig`, one of passed_on's.
std::string encode_signal(int sig);
/// Reads step 3 as it comes: takes `chunk` into `pending` and returns the signals of its complete
/// lines. A line that is not one of encode_signal's is dropped.
std::vector<int> decode_signals(std::string& pending, std::string_view chunk);

/// `s` quoted for a POSIX shell ('...', with ' as '\'').
std::string shell_quote(const std::string& s);

}  // namespace dtl::fanout
