// Checkpoints: whole (the model, where the run stands and, at stage 0, the optimizer, in one file)
// or sharded (the same file without the optimizer, and each rank's optimizer shard beside it), and
// the consolidation of a sharded one into a whole one that a run of any stage and world size can
// start from. Every file is written atomically (atomic_file.h).
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "loss_scale.h"
#include "model.h"
#include "options.h"

namespace dtl::train {

class FusedAdamW;
class ShardedAdamW;
struct Comm;

/// Where the run stands: what a checkpoint stores besides the model and the optimizer.
struct Progress {
  long long step = 0;            ///< optimizer steps done
  long long position = 0;        ///< global sample number of the next step's first row
  LossScaler::State loss_scale;  ///< where the dynamic loss scale stands (fp16)
};

/// How the optimizer state is kept: whole in the checkpoint (stage 0), or one file per rank.
struct Sharding {
  int zero = 0;
  int world = 1;
  std::string text() const;  ///< "--zero 0", "--zero 2 on 4 ranks": stored, and compared on resume
  bool whole() const { return zero == 0; }
};

/// The model shape as stored in checkpoints: resuming another shape is an error, not garbage.
std::string shape_text(const ModelShape& s);

/// Writes the checkpoint; `opt` (the optimizer) only for a whole one.
void save_checkpoint(const std::string& path, Gpt& model, const FusedAdamW* opt, const Progress& p,
                     const Sharding& sharding);

struct Loaded {
  Progress progress;
  Sharding sharding;  ///< the checkpoint's; whole: it held the optimizer, now in `whole`
};
/// Loads the model onto `device`, where the run stands, the CPU random state and, from a whole
/// checkpoint, the optimizer into `whole` (onto its parameters' devices). Throws UsageError for another model shape,
/// and for a sharded checkpoint of another sharding than `expected` (a whole one starts a run of any stage and world
/// size; nullptr: any sharding, for consolidation).
Loaded load_checkpoint(const std::string& path, Gpt& model, FusedAdamW& whole, c10::Device device,
                       const Sharding* expected);

/// Every rank writes its optimizer shard for the step, then (all written) rank 0 the checkpoint
/// that names the step, then each rank removes its shards of other steps. A run killed at any
/// point resumes from a checkpoint whose shards all exist.
void save_sharded(const std::string& dir, const std::string& checkpoint, Gpt& model, const ShardedAdamW& opt,
                  const Progress& p, const Sharding& sharding, Comm& comm);

/// Loads this rank's optimizer shard of the checkpoint at `step`.
void load_shard(const std::string& dir, long long step, int rank, ShardedAdamW& opt);

/// Makes the sharded checkpoint in `dir` whole: `out`/checkpoint.pt with the model, where the run
/// stands and every rank's optimizer state joined. `shape` is the run's model. Returns what it did,
/// in one line. Throws UsageError for what the user can mend (no checkpoint, a whole one, a missing
/// shard, `out` the same as `dir`).
std::string consolidate(const ModelShape& shape, const std::string& dir, const std::string& out);

}  // namespace dtl::train
