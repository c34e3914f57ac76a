// The training run: data, model, process group, reducer, optimizer, checkpoints. Declared without
// libtorch so that main.cc (and anything else) compiles without its headers.
#pragma once

#include "options.h"

namespace dtl::train {

/// Trains until `o.steps`, resuming from the checkpoint when there is one. Returns the exit code.
/// Throws UsageError for bad input found on the way (exit 2) and ReportedError for everything else,
/// described for torchrun's error file with what the rank was doing.
int run_training(const TrainOptions& o, const LaunchEnv& env);

}  // namespace dtl::train
