// The training run: data, model, process group, reducer, optimizer, checkpoints. Declared without
// libtorch so that main.cc (and anything else) compiles without its headers.
#pragma once

#include "options.h"

namespace dtl::train {

/// Trains until `o.steps`, resuming from the checkpoint when there is one, and returns 0. A failure
/// does not return: bad input found on the way exits 2 with one line, anything else exits 1 with
/// torchrun's error file saying what the rank was doing (see exit_with_report).
int run_training(const TrainOptions& o, const LaunchEnv& env);

/// dtl-train --consolidate DIR OUT: makes the sharded checkpoint in DIR whole in OUT and returns
/// 0; 2 after one line for what the user can mend, 1 after one line for anything else.
int run_consolidation(const TrainOptions& o);

}  // namespace dtl::train
