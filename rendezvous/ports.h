// Where the workers' rank 0 will listen: checked before any worker starts, so a taken port is one
// clear error instead of every worker timing out in init_process_group.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace dtl::rendezvous {

/// A port, or the reason there is none (one line, for the user).
using PortResult = std::variant<int, std::string>;

/// What the caller calls the address and the port, for its messages ("--master_addr"): the
/// rendezvous names no flag.
struct PortNames {
  std::string addr = "the address";
  std::string port = "port";
};

/// Binds addr:port the way c10d's TCPStore does (SO_REUSEADDR) and lets go again; port 0 asks the
/// kernel for a free one. Returns the port that is free, or why it is not, in the words of `names`.
PortResult reserve_check(const std::string& addr, int port, const PortNames& names);

/// `host[:port]` or `[v6addr]:port`; throws std::invalid_argument naming what is wrong.
std::pair<std::string, int> parse_endpoint(const std::string& text, int default_port);

/// Whether `host` resolves to an address of this machine (binding to it works).
bool is_local_address(const std::string& host);

}  // namespace dtl::rendezvous
