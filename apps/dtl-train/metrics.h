// What rank 0 reports per logged step, as a log line and as a JSON line, and how much of the
// gradient allreduce was hidden behind backward (computed from timestamps, so tests need no clock).
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace dtl::train {

/// One allreduce, from its launch (during backward) to its completion, in seconds on one clock.
struct CommInterval {
  double start = 0;
  double end = 0;
};

struct CommTiming {
  double busy = 0;     ///< time during which some allreduce was in flight (union of the intervals)
  double exposed = 0;  ///< the part of `busy` after backward ended: what the step waited for
  double hidden_share() const { return busy > 0 ? 1.0 - exposed / busy : 1.0; }
};

/// Busy and exposed communication time of one step whose backward ended at `backward_end`.
CommTiming comm_timing(std::vector<CommInterval> intervals, double backward_end);

struct StepRecord {
  long long step = 0;  ///< 1-based: the number of optimizer steps done
  long long steps = 0;
  double loss = 0;  ///< mean over the global batch
  double lr = 0;
  double grad_norm = 0;
  double step_time_s = 0;  ///< mean over the steps since the last record
  double cpu_time_s = 0;   ///< this process's CPU time per step (all threads): steadier than wall time on a busy machine
  double tokens_per_s = 0;
  double comm_wait_share = 0;    ///< share of step time spent waiting for gradients after backward
  double comm_hidden_share = 1;  ///< share of allreduce time that overlapped backward
  double mfu = std::nan("");     ///< model FLOPs utilisation per device; NaN when the peak is unknown
  long long tokens = 0;          ///< tokens trained on so far (global)
  int world_size = 1;
};

/// "step 10/100 loss 4.1234 lr 1.00e-03 tokens/s 12345 step 83.1 ms comm wait 2.1% hidden 95.0%",
/// then " mfu 41.0%" when known; "hidden n/a" where it is not measured (CUDA).
std::string log_line(const StepRecord& r);

/// One JSON object, no newline.
std::string metrics_json(const StepRecord& r);

}  // namespace dtl::train
