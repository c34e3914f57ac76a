// Where the workers' rank 0 will listen: checked before any worker starts, so a taken port is one
// clear error instead of every worker timing out in init_process_group.
#pragma once

#include <string>
#include <utility>

#include "base/error.h"

namespace dtl::rendezvous {

/// What the caller calls the address and the port, for its messages ("--master_addr"): the
/// rendezvous names no flag.
struct PortNames {
  std::string addr = "the address";
  std::string port = "port";  ///< the flag ("--master_port"), or the setting's name when `from` is set
  std::string from;           ///< where a port not typed as a flag came from ("cfg.yaml:1:14: master_port"), or ""

  /// The port as given: "--master_port 29655", or "master_port=29655 (from cfg.yaml:1:14: master_port)".
  std::string given(int value) const {
    return from.empty() ? port + " " + std::to_string(value) : port + "=" + std::to_string(value) + " (from " + from + ")";
  }
  /// How to ask for a free port instead: "--master_port=0", or "0" (said after the value's source).
  std::string free() const { return from.empty() ? port + "=0" : "0"; }
};

/// Binds addr:port the way c10d's TCPStore does (SO_REUSEADDR) and lets go again; port 0 asks the
/// kernel for a free one. Returns the port that is free, or why it is not, in the words of `names`
/// (one line, exit code 2).
Result<int> reserve_check(const std::string& addr, int port, const PortNames& names);

/// `host[:port]` or `[v6addr]:port`; throws std::invalid_argument naming what is wrong.
std::pair<std::string, int> parse_endpoint(const std::string& text, int default_port);

/// Whether `host` resolves to an address of this machine (binding to it works).
bool is_local_address(const std::string& host);

}  // namespace dtl::rendezvous
