#include "launcher/rdzv_endpoint.h"

#include <stdexcept>

#include <boost/asio/ip/address.hpp>

#include "base/printable.h"
#include "rendezvous/ports.h"

namespace dtl::launcher {

namespace {

/// The static backend's meeting point: --master_addr is a host alone, as torchrun takes it (an IPv6
/// address needs no brackets, "[::1]" is taken too), and the port is --master_port's. Joined as
/// "::1:29500" and parsed back, an IPv6 address was refused.
Result<std::pair<std::string, int>> master_endpoint(const config::LaunchOptions& o) {
  std::string host = o.master_addr;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  if (host.empty() || (host.find(':') != std::string::npos && (ec || !address.is_v6()))) {
    return fail(o.source(config::Setting::master_addr).where + ": '" + printable(o.master_addr, 200) +
                "' is not a host name or address (the port is --master_port's)");
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return fail(o.source(config::Setting::master_addr).where + " and " + o.source(config::Setting::master_port).where +
                ": port '" + std::to_string(o.master_port) + "' is not in 1..65535");
  }
  return std::pair{host, o.master_port};
}

}  // namespace

Result<std::pair<std::string, int>> rdzv_endpoint(const config::LaunchOptions& o) {
  const bool is_static = o.rdzv_backend == "static";
  std::string endpoint = o.rdzv_endpoint, from = o.source(config::Setting::rdzv_endpoint).where;
  if (endpoint.empty()) {
    if (!is_static)
      return fail(o.named(config::Setting::rdzv_backend, o.rdzv_backend) + " needs --rdzv_endpoint host[:port]");
    return master_endpoint(o);
  }
  try {
    return rendezvous::parse_endpoint(endpoint, is_static ? o.master_port : 29400);
  } catch (const std::invalid_argument& e) {
    return fail(from + ": " + e.what());
  }
}

}  // namespace dtl::launcher
