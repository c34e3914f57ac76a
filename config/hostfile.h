// The hosts of a job started from one command: DeepSpeed's hostfile (`host slots=N`, `#` comments;
// a bare `host` takes its worker count from --nproc_per_node), `--hosts h1:4,h2`, and DeepSpeed's
// `--include`/`--exclude` filters (`h1@h2:0,2`). Pure: text in, hosts or an Error naming the place out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "config/launch_options.h"

namespace dtl::config {

struct Host {
  std::string name;
  std::optional<int> slots;  ///< `slots=N`; unset: a bare host, one worker per --nproc_per_node
  /// The slots (GPU indices) the job uses on the host, after --include/--exclude; empty: all of them.
  std::vector<int> chosen;
};

/// `text` of the hostfile at `path`. Errors are "path:line: ..." (a malformed line, a duplicate host,
/// a bad slot count) or "path: no hosts".
Result<std::vector<Host>> parse_hostfile(const std::string& text, const std::string& path);

/// `--hosts h1:4,h2:4,h3` (a count after ':' is the host's slots). `from` names the value in errors.
Result<std::vector<Host>> parse_host_list(const std::string& list, const std::string& from);

/// DeepSpeed's --include (only these hosts, or these slots of a host) or --exclude (all but these),
/// `NAME[:SLOT[,SLOT...]][@NAME...]`; the hosts keep the hostfile's order. At most one of the two is
/// non-empty; `include_from`/`exclude_from` name them in errors. A filter names slots only of hosts
/// whose slot count is known; a host left with no slot is dropped; no host left is an error.
Result<std::vector<Host>> filter_hosts(std::vector<Host> hosts, const std::string& include,
                                       const std::string& include_from, const std::string& exclude,
                                       const std::string& exclude_from);

/// A run without hosts to start: the fan-out's settings that would be ignored without a word (a filter,
/// a host list given empty) are an Error (exit 2) naming where they came from.
Status refuse_host_settings_without_hosts(const LaunchOptions& o);

}  // namespace dtl::config
