#include "commands/top_screen.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

namespace dtl::commands {

namespace {

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t columns(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += !continuation(c);
  return n;
}

/// Cut to `width` columns (UTF-8 aware), with '~' marking the cut.
std::string fit(const std::string& s, size_t width) {
  if (columns(s) <= width) return s;
  if (width == 0) return "";
  size_t i = 0, kept = 0;
  for (; i < s.size(); ++i) {
    if (continuation(s[i])) continue;
    if (kept == width - 1) break;
    ++kept;
  }
  return s.substr(0, i) + "~";
}

std::string clock(double s) {
  const long total = static_cast<long>(s);
  return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
}

/// The hang watch's words, shortened where the column is narrow.
std::string doing_word(const std::string& doing, size_t width) {
  if (doing.size() <= width) return doing;
  if (doing == "blocked in the kernel (D)") return "blocked (D)";
  return fit(doing, width);
}

}  // namespace

std::string human_bytes(unsigned long long bytes) {
  constexpr const char* kUnits[] = {"K", "M", "G", "T", "P"};
  double v = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (v >= 1000 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  return v < 10 ? fmt::format("{:.1f}{}", v, kUnits[unit]) : fmt::format("{:.0f}{}", v, kUnits[unit]);
}

std::string short_seconds(double s) {
  if (s < 100) return fmt::format("{:.0f}s", std::floor(s));
  if (s < 6000) return fmt::format("{:.0f}m", std::floor(s / 60));
  if (s < 360000) return fmt::format("{:.0f}h", std::floor(s / 3600));
  return fmt::format("{:.0f}d", std::floor(s / 86400));
}

std::vector<std::string> top_lines(const watch::JobFigures& job, size_t width) {
  std::vector<std::string> lines;
  // The run id last: a long one is what gets cut.
  lines.push_back(
      fit(fmt::format("world {}   nodes {}   attempt {}   restarts left {}   up {}   run {}", job.world_size, job.nodes,
                      job.attempt, job.restarts_left(), clock(job.uptime_s), job.run_id),
          width));
  double cpu = 0;
  unsigned long long rss = 0;
  std::map<std::string, int> doing;
  for (const auto& r : job.ranks) {
    cpu += r.cpu_percent.value_or(0);
    rss += r.rss_bytes;
    ++doing[r.doing];
  }
  std::string counts;
  for (const auto& [word, n] : doing) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, word);
  lines.push_back(fit(fmt::format("ranks {}{}   cpu {:.0f}%   rss {}", job.ranks.size(),
                                  counts.empty() ? "" : " (" + counts + ")", cpu, human_bytes(rss)),
                      width));
  if (!job.missing.empty()) lines.push_back(fit("no figures came from " + job.missing, width));
  lines.emplace_back();
  // Fixed columns fill 79; a wider screen gives the rest to the host and what each rank is doing.
  const size_t extra = width > 79 ? width - 79 : 0;
  const size_t host_w = 10 + extra / 2, doing_w = 12 + (extra - extra / 2);
  const auto row = [&](const std::string& rank, const std::string& host, const std::string& pid,
                       const std::string& what, const std::string& cpu_s, const std::string& rss_s,
                       const std::string& gpu, const std::string& util, const std::string& gmem,
                       const std::string& restarts, const std::string& quiet) {
    return fit(
        fmt::format("{:>5} {:<{}} {:>7} {:<{}} {:>6} {:>6} {:>4} {:>4} {:>6} {:>3} {:>6}", rank, fit(host, host_w),
                    host_w, pid, doing_word(what, doing_w), doing_w, cpu_s, rss_s, gpu, util, gmem, restarts, quiet),
        width);
  };
  lines.push_back(row("RANK", "HOST", "PID", "DOING", "CPU%", "RSS", "GPU", "GPU%", "GMEM", "RST", "QUIET"));
  for (const auto& r : job.ranks) {
    std::string gpu = "-", util = "-", gmem = "-";
    if (r.gpu) {
      gpu = r.gpu->fake ? "fake" : std::to_string(r.gpu->index);
      if (r.gpu->util_percent) util = fmt::format("{:.0f}", *r.gpu->util_percent);
      if (r.gpu->memory_used_bytes) gmem = human_bytes(*r.gpu->memory_used_bytes);
    }
    lines.push_back(row(std::to_string(r.rank) + (r.slow ? "*" : ""), r.host, std::to_string(r.pid), r.doing,
                        r.cpu_percent ? fmt::format("{:.1f}", *r.cpu_percent) : "-", human_bytes(r.rss_bytes), gpu,
                        util, gmem, std::to_string(r.restarts), short_seconds(r.quiet_s)));
  }
  return lines;
}

}  // namespace dtl::commands
