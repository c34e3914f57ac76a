// Training sequences addressed by a global sample number, so which rank reads a sample never
// changes the sample: W ranks with batch B/W see exactly the rows one rank with batch B sees.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dtl::train {

/// How one optimizer step's global batch is cut into ranks and micro-batches.
struct Batching {
  int batch_size = 1;  ///< rows per rank per micro-batch
  int grad_accum = 1;  ///< micro-batches per step
  int world_size = 1;

  long long per_rank() const { return static_cast<long long>(batch_size) * grad_accum; }
  long long global() const { return per_rank() * world_size; }
};

/// Row `row` of micro-batch `micro` on `rank` is this row of the step's global batch: each rank
/// holds a contiguous block, micro-batches split it in order (so K=2 with B/2 equals K=1 with B).
inline long long global_row(const Batching& b, int rank, int micro, int row) {
  return rank * b.per_rank() + static_cast<long long>(micro) * b.batch_size + row;
}

/// A deterministic source of token sequences, addressed by sample number.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// Fills `out` (context + 1 tokens: inputs and the next-token targets) with sample `sample`.
  virtual void sample(long long sample, std::span<int64_t> out) const = 0;
  /// Distinct samples before repeating (an epoch); -1 for an endless stream.
  virtual long long size() const = 0;
  virtual std::string describe() const = 0;
};

/// Learnable synthetic tokens: mostly a fixed random successor of the previous token, sometimes a
/// random one, so the loss falls quickly from ln(vocab). Needs no download.
class SyntheticTokens : public TokenSource {
 public:
  SyntheticTokens(uint64_t seed, int vocab);
  void sample(long long sample, std::span<int64_t> out) const override;
  long long size() const override { return -1; }
  std::string describe() const override;

 private:
  uint64_t seed_;
  std::vector<int32_t> successor_;
};

/// Byte-level text: the file is cut into windows of context+1 bytes (sharing one byte), visited
/// in a new seeded order each epoch. Throws std::runtime_error when the file cannot be read.
class TextTokens : public TokenSource {
 public:
  TextTokens(const std::string& path, int context, uint64_t seed);
  void sample(long long sample, std::span<int64_t> out) const override;
  long long size() const override { return windows_; }
  std::string describe() const override;

 private:
  const std::vector<uint32_t>& order(long long epoch) const;

  std::string path_;
  std::string bytes_;
  int context_;
  uint64_t seed_;
  long long windows_;
  mutable long long cached_epoch_ = -1;
  mutable std::vector<uint32_t> order_;
};

/// Why this data cannot feed this many ranks, or "" when it can. Pure.
std::string check_data_fits(const TokenSource& data, const Batching& b, int context);

/// splitmix64: the counter-based generator behind every random choice here (stable everywhere).
uint64_t mix64(uint64_t x);

}  // namespace dtl::train
