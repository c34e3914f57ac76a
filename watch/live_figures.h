// The live view of one node's workers, for `dtlaunch top` (through the job's socket) and Prometheus
// (--metrics_port): each rank's figures now, from the hang watch's /proc samples (read afresh only
// when none is recent) and NVML, and the job's through the rendezvous. Nothing is read until asked,
// and no stack is read, so asking never pauses a worker.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/error.h"
#include "node/gpus.h"
#include "watch/hang_watch.h"
#include "watch/job_figures.h"

namespace dtl::watch {

class MetricsServer;

class LiveFigures {
 public:
  /// What the launch knows of this node.
  struct Facts {
    std::string host;
    std::vector<std::optional<node::Gpu>> gpus;  ///< the GPU of each local rank
    bool fake_gpus = false;                      ///< --fake_gpus: no figures
  };
  /// What the current attempt knows of the job.
  struct Attempt {
    std::string run_id;
    int world_size = 0;
    int nodes = 1;
    int attempt = 0;
    int max_restarts = 0;
  };
  /// `probes`: the running workers now (the hang watch's); `watch`: its samples and the job's socket.
  LiveFigures(boost::asio::io_context& io, Facts facts, HangWatch& watch,
              std::function<std::vector<HangWatch::Probe>()> probes);
  ~LiveFigures();

  void attempt(Attempt a) { attempt_ = std::move(a); }
  /// This node's figures: at once from samples at most 1.5 s old, else after reading /proc twice
  /// a quarter of a second apart (a CPU share needs two).
  void node(std::function<void(JobFigures)> done);
  /// Every node's parts for a job of several: `done` runs once all came or the time is up.
  using Gather =
      std::function<void(std::function<void(const std::vector<std::string>& parts, const std::string& missing)> done)>;
  /// Set for a round of several nodes; nullopt: this node's ranks are the job's.
  void job_wide(std::optional<Gather> gather) { gather_ = std::move(gather); }
  /// The job's figures: this node's, or every node's where job_wide is set.
  void job(std::function<void(JobFigures)> done);
  /// This node's figures as JSON for the rendezvous, at most `budget` bytes (ranks past it left out).
  void part(size_t budget, std::function<void(std::string)> done);
  /// Serves `/metrics` (this node) and `/metrics/job` (the job) on addr:port; an error (exit code 2,
  /// naming `called`) when it cannot listen there.
  Status serve_metrics(const std::string& addr, int port, const std::string& called);

 private:
  JobFigures figures_now(const std::vector<HangWatch::Probe>& probes);

  boost::asio::io_context& io_;
  const Facts facts_;
  HangWatch& watch_;
  std::function<std::vector<HangWatch::Probe>()> probes_;
  Attempt attempt_;
  std::optional<Gather> gather_;
  node::GpuMeter gpus_;
  const HangClock::time_point started_ = HangClock::now();
  std::unique_ptr<MetricsServer> metrics_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtl::watch
