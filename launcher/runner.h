// What main runs: the supervisor (one node) or the elastic agent (a node of a multi-node job).
#pragma once

#include "base/error.h"

namespace dtl::launcher {

class Runner {
 public:
  virtual ~Runner() = default;
  /// Runs the job to its end on this node and returns dtlaunch's exit code: 0, the root cause's
  /// (base/failure.h), 128+N after signal N, or what the rendezvous decided. An Error (exit code 2):
  /// the job was refused before anything started (a port taken since the plan).
  virtual Result<int> run() = 0;
  /// Whether any worker output went to per-rank files (the log directory is worth keeping).
  virtual bool wrote_log_files() const = 0;
};

}  // namespace dtl::launcher
