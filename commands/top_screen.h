// `dtlaunch top`'s screen, from a job's figures: a header (the run, its size, attempt, restarts left,
// uptime), the totals, then a row per rank, each line within `width` columns (80 over ssh). Pure, so
// that its tests need no terminal.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "watch/job_figures.h"

namespace dtl::commands {

/// The screen's lines, none wider than `width` columns (it looks best from 79 up).
std::vector<std::string> top_lines(const watch::JobFigures& job, size_t width);

/// Sizes as top shows them: 512K, 1.5M, 350M, 1.2G.
std::string human_bytes(unsigned long long bytes);
/// Durations as top shows them: 42s, 17m, 5h, 3d.
std::string short_seconds(double s);

}  // namespace dtl::commands
