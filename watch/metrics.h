// A job's figures in Prometheus' text exposition format (version 0.0.4): per-rank series labelled
// rank, local_rank, host and run_id, in base units, counters ending in _total; GPU series under the
// DCGM exporter's names and labels (gpu, UUID, device, Hostname; not its modelName, which promtool's
// lint refuses as camelCase) plus the rank's, so that dashboards made for dcgm-exporter read them.
#pragma once

#include <string>

#include "watch/job_figures.h"

namespace dtl::watch {

/// The page a scrape gets.
std::string prometheus_text(const JobFigures& job);

/// The Content-Type of that page.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace dtl::watch
