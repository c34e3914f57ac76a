// Where the nodes of a job meet, from the settings: the agents' rendezvous, or the store of torch's
// static handler on one node.
#pragma once

#include <string>
#include <utility>

#include "base/error.h"
#include "config/launch_options.h"

namespace dtl::launcher {

/// Where the agents meet: --rdzv_endpoint, or --master_addr:--master_port for the static backend.
Result<std::pair<std::string, int>> rdzv_endpoint(const config::LaunchOptions& o);

}  // namespace dtl::launcher
