#include "data.h"

#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace dtl::train {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

/// Fisher-Yates with mix64 as the source: the same order for the same seed on every machine.
template <class T>
void shuffle(std::vector<T>& v, uint64_t seed) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = mix64(seed + i) % i;
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

SyntheticTokens::SyntheticTokens(uint64_t seed, int vocab) : seed_(mix64(seed ^ 0x5eedda7aULL)), successor_(vocab) {
  std::iota(successor_.begin(), successor_.end(), 0);
  shuffle(successor_, seed_);
}

void SyntheticTokens::sample(long long sample, std::span<int64_t> out) const {
  const uint64_t vocab = successor_.size();
  uint64_t state = mix64(seed_ ^ mix64(static_cast<uint64_t>(sample)));
  int64_t token = static_cast<int64_t>(state % vocab);
  for (auto& t : out) {
    t = token;
    state = mix64(state);
    token = (state & 7) == 0 ? static_cast<int64_t>((state >> 3) % vocab) : successor_[token];
  }
}

std::string SyntheticTokens::describe() const {
  return "synthetic tokens (vocab " + std::to_string(successor_.size()) + ")";
}

TextTokens::TextTokens(const std::string& path, int context, uint64_t seed)
    : path_(path), context_(context), seed_(mix64(seed ^ 0x7e47ULL)) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read data file '" + path + "'");
  std::stringstream s;
  s << in.rdbuf();
  bytes_ = s.str();
  windows_ = bytes_.size() > 0 ? static_cast<long long>((bytes_.size() - 1) / context_) : 0;
}

const std::vector<uint32_t>& TextTokens::order(long long epoch) const {
  if (epoch != cached_epoch_) {
    order_.resize(windows_);
    std::iota(order_.begin(), order_.end(), 0u);
    shuffle(order_, mix64(seed_ + static_cast<uint64_t>(epoch)));
    cached_epoch_ = epoch;
  }
  return order_;
}

void TextTokens::sample(long long sample, std::span<int64_t> out) const {
  const long long window = order(sample / windows_)[sample % windows_];
  const size_t start = static_cast<size_t>(window) * context_;
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(bytes_[start + i]);
}

std::string TextTokens::describe() const {
  return "'" + path_ + "' (" + std::to_string(bytes_.size()) + " bytes, " + std::to_string(windows_) +
         " sequences of " + std::to_string(context_ + 1) + " bytes)";
}

std::string check_data_fits(const TokenSource& data, const Batching& b, int context) {
  const long long n = data.size();
  if (n < 0 || n >= b.global()) return "";
  std::ostringstream e;
  if (n == 0) {
    e << "data file " << data.describe() << " is shorter than one sequence (--context " << context << " needs "
      << context + 1 << " bytes)";
  } else if (n < b.world_size) {
    e << "data file " << data.describe() << " has fewer sequences than the " << b.world_size << " ranks";
  } else {
    e << "data file " << data.describe() << " has fewer sequences than one global batch of " << b.global() << " ("
      << b.world_size << " ranks x --batch_size " << b.batch_size << " x --grad_accum " << b.grad_accum << ")";
  }
  return e.str();
}

}  // namespace dtl::train
