#include "watch/live_figures.h"

#include <boost/asio/steady_timer.hpp>

#include "node/proc_stat.h"
#include "watch/metrics.h"
#include "watch/metrics_server.h"

namespace dtl::watch {
namespace asio = boost::asio;

namespace {

/// The hang watch samples once a second: a sample this young is the newest there is.
constexpr auto kFresh = std::chrono::milliseconds(1500);
/// Without the hang watch's samples, the span of a CPU share read on demand.
constexpr auto kWindow = std::chrono::milliseconds(250);

}  // namespace

LiveFigures::LiveFigures(asio::io_context& io, Facts facts, HangWatch& watch,
                         std::function<std::vector<HangWatch::Probe>()> probes)
    : io_(io), facts_(std::move(facts)), watch_(watch), probes_(std::move(probes)) {
  watch_.answer_ranks(
      [this](StacksSocket::Reply reply) { job([reply](JobFigures figures) { reply(figures_json(figures)); }); });
}

LiveFigures::~LiveFigures() {
  *alive_ = false;
  watch_.answer_ranks(nullptr);
}

void LiveFigures::node(std::function<void(JobFigures)> done) {
  const auto probes = probes_();
  RankSampler& sampler = watch_.sampler();
  const auto now = HangClock::now();
  bool fresh = true;
  for (const auto& p : probes) {
    const auto seen = sampler.latest(p.pid, now, kFresh);
    if (seen && seen->cpu_percent) continue;
    fresh = false;
    sampler.record(p.pid, now, node::proc_usage(p.pid));
  }
  if (fresh) return done(figures_now(probes));
  auto timer = std::make_shared<asio::steady_timer>(io_, kWindow);
  timer->async_wait([this, timer, done, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    const auto probes = probes_();
    const auto now = HangClock::now();
    for (const auto& p : probes) watch_.sampler().record(p.pid, now, node::proc_usage(p.pid));
    done(figures_now(probes));
  });
}

JobFigures LiveFigures::figures_now(const std::vector<HangWatch::Probe>& probes) {
  const auto now = HangClock::now();
  JobFigures job;
  job.run_id = attempt_.run_id;
  job.world_size = attempt_.world_size;
  job.nodes = attempt_.nodes;
  job.attempt = attempt_.attempt;
  job.max_restarts = attempt_.max_restarts;
  job.uptime_s = std::chrono::duration<double>(now - started_).count();
  bool any_gpu = false;
  for (const auto& g : facts_.gpus) any_gpu |= g.has_value();
  const auto readings = any_gpu && !facts_.fake_gpus ? gpus_.read() : std::vector<node::GpuReading>{};
  for (const auto& p : probes) {
    RankFigures r;
    r.rank = p.rank;
    r.local_rank = p.local_rank;
    r.host = facts_.host;
    r.pid = p.pid;
    if (auto seen = watch_.sampler().latest(p.pid, now, kFresh + kWindow)) {
      r.state = seen->state;
      r.cpu_s = seen->cpu_s;
      r.cpu_percent = seen->cpu_percent;
      r.rss_bytes = seen->rss_bytes;
    }
    r.doing = r.state == '?' ? "gone" : doing_from_proc(r.cpu_percent.value_or(0), r.state);
    r.restarts = attempt_.attempt;
    r.quiet_s = std::chrono::duration<double>(now - p.last_output).count();
    r.slow = watch_.straggler() && watch_.straggler()->rank == p.rank;  // the straggler watch's verdict
    const size_t lr = static_cast<size_t>(p.local_rank);
    if (lr < facts_.gpus.size() && facts_.gpus[lr]) {
      const node::Gpu& gpu = *facts_.gpus[lr];
      GpuFigures g{gpu.index, gpu.uuid, gpu.name, facts_.fake_gpus, std::nullopt, std::nullopt, std::nullopt};
      for (const auto& reading : readings) {
        if (reading.uuid != gpu.uuid) continue;
        if (reading.util_percent) g.util_percent = *reading.util_percent;
        g.memory_used_bytes = reading.memory_used_bytes;
        g.memory_total_bytes = reading.memory_total_bytes;
      }
      r.gpu = std::move(g);
    }
    job.ranks.push_back(std::move(r));
  }
  std::vector<pid_t> running;
  for (const auto& p : probes) running.push_back(p.pid);
  watch_.sampler().keep_only(running);
  return job;
}

void LiveFigures::job(std::function<void(JobFigures)> done) {
  if (!gather_) return node(std::move(done));
  (*gather_)([done](const std::vector<std::string>& parts, const std::string& missing) {
    std::vector<JobFigures> read;
    for (const auto& p : parts) {
      if (auto f = parse_figures(p)) read.push_back(std::move(*f));
    }
    done(merge_figures(read, missing));
  });
}

void LiveFigures::part(size_t budget, std::function<void(std::string)> done) {
  node([budget, done](JobFigures figures) {
    std::string json = figures_json(figures);
    while (json.size() > budget && !figures.ranks.empty()) {
      figures.ranks.pop_back();
      json = figures_json(figures);
    }
    done(std::move(json));
  });
}

Status LiveFigures::serve_metrics(const std::string& addr, int port, const std::string& called) {
  auto server = MetricsServer::listen(
      io_, addr, port, called, [this, alive = alive_](const std::string& path, MetricsServer::Respond respond) {
        if (!*alive) return;
        if (path != "/metrics" && path != "/metrics/job") {
          return respond(404, "text/plain", "dtlaunch serves /metrics (this node) and /metrics/job (every node)\n");
        }
        const auto page = [respond](JobFigures figures) {
          respond(200, kPrometheusContentType, prometheus_text(figures));
        };
        if (path == "/metrics") return node(page);
        job(page);
      });
  if (!server) return tl::unexpected(server.error());
  metrics_ = std::move(*server);
  return {};
}

}  // namespace dtl::watch
