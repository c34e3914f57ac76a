#include "watch/job_figures.h"

#include <algorithm>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/text.h"

namespace dtl::watch {

namespace {

using text::json_string;

template <class T>
std::string or_null(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "null";
}

std::string gpu_json(const std::optional<GpuFigures>& g) {
  if (!g) return "null";
  return fmt::format(
      R"({{"index": {}, "uuid": {}, "name": {}, "fake": {}, "util_percent": {}, "memory_used_bytes": {}, )"
      R"("memory_total_bytes": {}}})",
      g->index, json_string(g->uuid), json_string(g->name), g->fake ? "true" : "false", or_null(g->util_percent),
      or_null(g->memory_used_bytes), or_null(g->memory_total_bytes));
}

template <class T>
std::optional<T> optional_of(const YAML::Node& n) {
  if (!n || n.IsNull()) return std::nullopt;
  return n.as<T>();
}

}  // namespace

std::string figures_json(const JobFigures& job) {
  std::string out = fmt::format(
      R"({{"run_id": {}, "world_size": {}, "nodes": {}, "attempt": {}, "max_restarts": {}, "restarts_left": {}, )"
      R"("uptime_s": {:.1f}, "missing": {}, "ranks": [)",
      json_string(job.run_id), job.world_size, job.nodes, job.attempt, job.max_restarts, job.restarts_left(),
      job.uptime_s, json_string(job.missing));
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const auto& r = job.ranks[i];
    out += fmt::format(
        R"({}{{"rank": {}, "local_rank": {}, "host": {}, "pid": {}, "state": {}, "doing": {}, "cpu_percent": {}, )"
        R"("cpu_s": {:.2f}, "rss_bytes": {}, "gpu": {}, "restarts": {}, "quiet_s": {:.1f}, "slow": {}}})",
        i ? ", " : "", r.rank, r.local_rank, json_string(r.host), r.pid, json_string(std::string(1, r.state)),
        json_string(r.doing), r.cpu_percent ? fmt::format("{:.1f}", *r.cpu_percent) : "null", r.cpu_s, r.rss_bytes,
        gpu_json(r.gpu), r.restarts, r.quiet_s, r.slow ? "true" : "false");
  }
  return out + "]}";
}

std::optional<JobFigures> parse_figures(const std::string& json) {
  try {
    const YAML::Node root = YAML::Load(json);
    if (!root.IsMap() || !root["ranks"] || !root["ranks"].IsSequence()) return std::nullopt;
    JobFigures job;
    job.run_id = root["run_id"].as<std::string>("");
    job.world_size = root["world_size"].as<int>(0);
    job.nodes = root["nodes"].as<int>(1);
    job.attempt = root["attempt"].as<int>(0);
    job.max_restarts = root["max_restarts"].as<int>(0);
    job.uptime_s = root["uptime_s"].as<double>(0);
    job.missing = root["missing"].as<std::string>("");
    for (const auto& n : root["ranks"]) {
      RankFigures r;
      r.rank = n["rank"].as<int>();
      r.local_rank = n["local_rank"].as<int>(0);
      r.host = n["host"].as<std::string>("");
      r.pid = n["pid"].as<pid_t>(0);
      const std::string state = n["state"].as<std::string>("?");
      r.state = state.empty() ? '?' : state[0];
      r.doing = n["doing"].as<std::string>("");
      r.cpu_percent = optional_of<double>(n["cpu_percent"]);
      r.cpu_s = n["cpu_s"].as<double>(0);
      r.rss_bytes = n["rss_bytes"].as<unsigned long long>(0);
      if (const auto g = n["gpu"]; g && g.IsMap()) {
        GpuFigures gpu;
        gpu.index = g["index"].as<int>(0);
        gpu.uuid = g["uuid"].as<std::string>("");
        gpu.name = g["name"].as<std::string>("");
        gpu.fake = g["fake"].as<bool>(false);
        gpu.util_percent = optional_of<double>(g["util_percent"]);
        gpu.memory_used_bytes = optional_of<unsigned long long>(g["memory_used_bytes"]);
        gpu.memory_total_bytes = optional_of<unsigned long long>(g["memory_total_bytes"]);
        r.gpu = std::move(gpu);
      }
      r.restarts = n["restarts"].as<int>(0);
      r.quiet_s = n["quiet_s"].as<double>(0);
      r.slow = n["slow"].as<bool>(false);
      job.ranks.push_back(std::move(r));
    }
    return job;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

JobFigures merge_figures(const std::vector<JobFigures>& parts, const std::string& missing) {
  JobFigures job;
  if (!parts.empty()) job = parts.front();
  job.ranks.clear();
  for (const auto& p : parts) {
    job.uptime_s = std::max(job.uptime_s, p.uptime_s);
    job.attempt = std::max(job.attempt, p.attempt);
    job.ranks.insert(job.ranks.end(), p.ranks.begin(), p.ranks.end());
  }
  std::stable_sort(job.ranks.begin(), job.ranks.end(),
                   [](const RankFigures& a, const RankFigures& b) { return a.rank < b.rank; });
  job.missing = missing;
  return job;
}

}  // namespace dtl::watch
