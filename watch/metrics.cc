#include "watch/metrics.h"

#include <fmt/format.h>

namespace dtl::watch {

namespace {

/// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

/// One family: its HELP and TYPE before its first sample (a family with none is left out).
class Family {
 public:
  Family(std::string& out, const char* name, const char* type, const char* help)
      : out_(out), name_(name), type_(type), help_(help) {}
  void sample(const std::string& labels, double value) {
    if (!started_) out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help_, name_, type_);
    started_ = true;
    out_ += fmt::format("{}{{{}}} {}\n", name_, labels, value);
  }

 private:
  std::string& out_;
  const char *name_, *type_, *help_;
  bool started_ = false;
};

std::string rank_labels(const JobFigures& job, const RankFigures& r) {
  return fmt::format(R"(rank="{}",local_rank="{}",host="{}",run_id="{}")", r.rank, r.local_rank, label_value(r.host),
                     label_value(job.run_id));
}

std::string gpu_labels(const JobFigures& job, const RankFigures& r) {
  const GpuFigures& g = *r.gpu;
  return fmt::format(R"(gpu="{}",UUID="{}",device="nvidia{}",Hostname="{}",{})", g.index, label_value(g.uuid), g.index,
                     label_value(r.host), rank_labels(job, r));
}

/// The hang watch's words as a state set: one series per word, 1 for the rank's.
constexpr std::pair<const char*, const char*> kStates[] = {
    {"running", "running"}, {"blocked", "blocked"}, {"blocked_in_kernel", "blocked in the kernel (D)"}};

}  // namespace

std::string prometheus_text(const JobFigures& job) {
  std::string out;
  const std::string run = fmt::format(R"(run_id="{}")", label_value(job.run_id));
  Family(out, "dtlaunch_job_world_size", "gauge", "Ranks in the job.").sample(run, job.world_size);
  Family(out, "dtlaunch_job_nodes", "gauge", "Nodes in the job.").sample(run, job.nodes);
  Family(out, "dtlaunch_job_restarts_total", "counter", "Restarts of the job's workers so far.")
      .sample(run, job.attempt);
  Family(out, "dtlaunch_job_max_restarts", "gauge", "Restarts allowed (--max_restarts).").sample(run, job.max_restarts);
  Family(out, "dtlaunch_job_uptime_seconds", "gauge", "Seconds since dtlaunch started.").sample(run, job.uptime_s);

  Family info(out, "dtlaunch_rank_info", "gauge", "Each running rank, with its pid.");
  for (const auto& r : job.ranks) info.sample(rank_labels(job, r) + fmt::format(R"(,pid="{}")", r.pid), 1);
  Family cpu(out, "dtlaunch_rank_cpu_seconds_total", "counter", "CPU time of the rank and its children.");
  for (const auto& r : job.ranks) cpu.sample(rank_labels(job, r), r.cpu_s);
  Family rss(out, "dtlaunch_rank_resident_memory_bytes", "gauge", "Resident memory of the rank's own process.");
  for (const auto& r : job.ranks) rss.sample(rank_labels(job, r), static_cast<double>(r.rss_bytes));
  Family state(out, "dtlaunch_rank_state", "gauge",
               "What the rank is doing, from /proc: running (a fifth of a CPU or more), blocked, blocked_in_kernel.");
  for (const auto& r : job.ranks) {
    for (const auto& [word, doing] : kStates) {
      state.sample(rank_labels(job, r) + fmt::format(R"(,state="{}")", word), r.doing == doing ? 1 : 0);
    }
  }
  Family restarts(out, "dtlaunch_rank_restarts_total", "counter", "Restarts of the job when the rank started.");
  for (const auto& r : job.ranks) restarts.sample(rank_labels(job, r), r.restarts);
  Family quiet(out, "dtlaunch_rank_last_output_age_seconds", "gauge", "Seconds since the rank's last output.");
  for (const auto& r : job.ranks) quiet.sample(rank_labels(job, r), r.quiet_s);
  Family slow(out, "dtlaunch_rank_slow", "gauge",
              "1 for the rank that arrives last at most of its node's collectives (the flight recorder's times).");
  for (const auto& r : job.ranks) slow.sample(rank_labels(job, r), r.slow ? 1 : 0);

  const auto measured = [](const RankFigures& r) { return r.gpu && !r.gpu->fake; };
  Family util(out, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
  for (const auto& r : job.ranks) {
    if (measured(r) && r.gpu->util_percent) util.sample(gpu_labels(job, r), *r.gpu->util_percent);
  }
  Family used(out, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).");
  for (const auto& r : job.ranks) {
    if (measured(r) && r.gpu->memory_used_bytes) {
      used.sample(gpu_labels(job, r), static_cast<double>(*r.gpu->memory_used_bytes / (1024 * 1024)));
    }
  }
  Family free(out, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).");
  for (const auto& r : job.ranks) {
    if (measured(r) && r.gpu->memory_used_bytes && r.gpu->memory_total_bytes) {
      const auto left = *r.gpu->memory_total_bytes - std::min(*r.gpu->memory_total_bytes, *r.gpu->memory_used_bytes);
      free.sample(gpu_labels(job, r), static_cast<double>(left / (1024 * 1024)));
    }
  }
  return out;
}

}  // namespace dtl::watch
