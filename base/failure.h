// A failed worker as every layer sees it: the supervisor's summary, the rendezvous wire (Failed,
// Exit) and the server's decision. One record and one root-cause rule for one node and for many.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dtl {

struct Failure {
  int32_t rank = 0, local_rank = 0, pid = 0;
  int32_t exitcode = 1;     ///< torchrun's convention: -N for death by signal N
  int64_t observed_ns = 0;  ///< when it was reaped (system clock, ns since epoch): orders root causes
  int64_t timestamp_s = 0;  ///< shown as `time`: the error file's, else when it was reaped; 0: unknown
  std::string host;         ///< the node it failed on; empty: this one
  std::string error_file;   ///< path, or <N/A> when the worker wrote none
  std::string message;      ///< the traceback line(s) shown in the summary
  int64_t peak_rss_kb = 0;  ///< its peak resident memory (wait4's ru_maxrss); 0: unknown (another node's)
  bool operator==(const Failure&) const = default;
};

/// The root-cause order: the first observed failure first, the lowest rank on a tie.
inline bool observed_before(const Failure& a, const Failure& b) {
  return a.observed_ns != b.observed_ns ? a.observed_ns < b.observed_ns : a.rank < b.rank;
}

/// The root cause among `failures` (non-empty), on this node or across nodes.
inline const Failure& root_cause(const std::vector<Failure>& failures) {
  return *std::min_element(failures.begin(), failures.end(), observed_before);
}

/// dtlaunch's exit code for failures: the root cause's exit code, 128+N for a death by signal N;
/// 1 when there is none to blame (a round that stopped for another reason).
inline int exit_code_for(const std::vector<Failure>& failures) {
  if (failures.empty()) return 1;
  const Failure& root = root_cause(failures);
  return root.exitcode < 0 ? 128 - root.exitcode : root.exitcode;
}

}  // namespace dtl
