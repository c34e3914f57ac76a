// Moved to base/posix.h. This forwarding header stays only until worker_group.cc, supervisor.cc and
// elastic_agent.cc (rewritten on other branches) include base/posix.h; then it goes.
#pragma once

#include "base/posix.h"

namespace dtl::launcher {
using posix::host_name;
using posix::write_all;
}  // namespace dtl::launcher
