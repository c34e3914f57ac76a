#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dtl::train {

CommTiming comm_timing(std::vector<CommInterval> intervals, double backward_end) {
  std::sort(intervals.begin(), intervals.end(), [](auto& a, auto& b) { return a.start < b.start; });
  CommTiming t;
  double cur_start = 0, cur_end = -1;
  auto close = [&] {
    if (cur_end <= cur_start) return;
    t.busy += cur_end - cur_start;
    t.exposed += std::max(0.0, cur_end - std::max(cur_start, backward_end));
  };
  for (const auto& i : intervals) {
    if (i.start > cur_end) {
      close();
      cur_start = i.start;
      cur_end = i.end;
    } else {
      cur_end = std::max(cur_end, i.end);
    }
  }
  close();
  return t;
}

namespace {

/// JSON has no NaN or infinity: a diverged loss is written as null.
std::string num(double v, const char* fmt = "%.9g") {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::string log_line(const StepRecord& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld loss %.4f lr %.2e tokens/s %.0f step %.1f ms comm wait %.1f%% hidden ",
                r.step, r.steps, r.loss, r.lr, r.tokens_per_s, r.step_time_s * 1e3, r.comm_wait_share * 100);
  std::string line = buf;
  line += std::isfinite(r.comm_hidden_share) ? num(r.comm_hidden_share * 100, "%.1f") + "%" : "n/a";
  if (std::isfinite(r.mfu)) line += " mfu " + num(r.mfu * 100, "%.1f") + "%";
  return line;
}

std::string metrics_json(const StepRecord& r) {
  return "{\"step\": " + std::to_string(r.step) + ", \"loss\": " + num(r.loss) + ", \"lr\": " + num(r.lr) +
         ", \"grad_norm\": " + num(r.grad_norm) + ", \"step_time_s\": " + num(r.step_time_s) + ", \"cpu_time_s\": " + num(r.cpu_time_s) +
         ", \"tokens_per_s\": " + num(r.tokens_per_s) + ", \"comm_wait_share\": " + num(r.comm_wait_share) +
         ", \"comm_hidden_share\": " + num(r.comm_hidden_share) + ", \"mfu\": " + num(r.mfu) + ", \"tokens\": " + std::to_string(r.tokens) +
         ", \"world_size\": " + std::to_string(r.world_size) + "}";
}

}  // namespace dtl::train
