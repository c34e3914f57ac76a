// What `dtlaunch top` and the metrics show of a running job: each rank's figures (from /proc and
// NVML, never from its stack, so reading them never pauses a worker) and the job's, as plain
// structs; a node's figures as JSON, which the rendezvous carries to the node that asked, and every
// node's as one job.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtl::watch {

/// The GPU a rank computes on, as NVML sees it now.
struct GpuFigures {
  int index = 0;  ///< physical index, as CUDA_VISIBLE_DEVICES counts without narrowing
  std::string uuid;
  std::string name;
  bool fake = false;                   ///< --fake_gpus: a GPU in name only, with no figures
  std::optional<double> util_percent;  ///< busy share of the last sample period (NVML's)
  std::optional<unsigned long long> memory_used_bytes, memory_total_bytes;
};

struct RankFigures {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  pid_t pid = 0;
  char state = '?';                   ///< /proc/PID/stat's
  std::string doing;                  ///< the hang watch's words: running, blocked, blocked in the kernel (D)
  std::optional<double> cpu_percent;  ///< of one CPU, the rank and its children; nullopt: not measured yet
  double cpu_s = 0;                   ///< CPU time of the rank and its children so far
  unsigned long long rss_bytes = 0;   ///< the rank's own resident memory
  std::optional<GpuFigures> gpu;      ///< none: the rank has no GPU
  int restarts = 0;                   ///< of the job, when this rank's attempt started
  double quiet_s = 0;                 ///< since its last output
  bool slow = false;                  ///< the job's slow rank, once something names one
};

struct JobFigures {
  std::string run_id;
  int world_size = 0;
  int nodes = 1;
  int attempt = 0;  ///< the restart count
  int max_restarts = 0;
  double uptime_s = 0;             ///< since dtlaunch started, on the node that answered
  std::vector<RankFigures> ranks;  ///< by rank
  std::string missing;             ///< the nodes whose figures did not come, "" when none

  int restarts_left() const { return max_restarts > attempt ? max_restarts - attempt : 0; }
};

/// As one JSON object (`dtlaunch top --json`, and a node's part on the wire).
std::string figures_json(const JobFigures& job);
/// A part back; nullopt when it is not one.
std::optional<JobFigures> parse_figures(const std::string& json);
/// Every node's part as the job: the ranks of all, by rank; the job's facts from the first part, the
/// longest uptime, the highest attempt. `missing`: the nodes that sent none.
JobFigures merge_figures(const std::vector<JobFigures>& parts, const std::string& missing);

}  // namespace dtl::watch
