// Asking this node's ranks for their flight recorder's record (watch/flight_recorder.h), and running
// the analyzer on the records: blocking calls for the watch's threads, each bounded in time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "watch/flight_recorder.h"

namespace dtl::watch {

/// Why a rank has no record where nothing could ask it: a native process without NCCL's pipe.
inline constexpr std::string_view kNotAsked = "not a Python process, and no NCCL pipe: nothing asks it";

/// A rank to ask.
struct RecorderRank {
  int rank = 0;
  pid_t pid = 0;
  RecorderFiles files;
};

/// One rank's answer.
struct RecordAnswer {
  int rank = 0;
  bool ok = false;
  std::string why;     ///< why it has no record
  std::string python;  ///< its Python, where its hook answered: the analyzer runs with it
  std::string by;      ///< what asked it: "dtlaunch's hook", "NCCL's pipe"
};

/// The bounds of one asking, every rank at once: `cancel_fd` readable ends it.
struct AskLimits {
  std::chrono::milliseconds timeout{2000};       ///< for a rank's hook
  std::chrono::milliseconds pipe_timeout{3500};  ///< for NCCL's pipe, which torch reads once a second
  int cancel_fd = -1;
};

/// Every rank's record into `paths.folder` as `rank_<R>`, all asked at once: through NCCL's pipe
/// where the rank has one (torch reads it once a second, and writes its dump to its
/// TORCH_FR_DUMP_TEMP_FILE, copied here when that is the user's), else through dtlaunch's hook.
/// A rank that does not answer within its timeout is named so.
std::vector<RecordAnswer> collect_records(const std::vector<RecorderRank>& ranks, const RecorderPaths& paths,
                                          const AskLimits& limits);

/// Each rank's arrival times at its last collectives (the hook's "times" JSON), by rank; a rank whose
/// hook did not answer is left out.
std::map<int, std::string> collect_times(const std::vector<RecorderRank>& ranks, const AskLimits& limits);

/// The Python to run the analyzer with: the first rank's that its hook named, else the Python
/// process of a rank (its argv[0], which keeps a venv), else `fallback`.
std::string analyzer_python(const std::vector<RecordAnswer>& answers, const std::vector<RecorderRank>& ranks,
                            const std::string& fallback);

/// One run of the analyzer script, bounded as a stack reader is.
struct AnalyzerRun {
  std::string python;
  std::string script;
  std::vector<std::string> args;
  std::chrono::milliseconds timeout{60000};
  int cancel_fd = -1;
  int cgroup_fd = -1;
  int cgroup_procs_fd = -1;
};
/// Its verdict (`error` says why there is none).
CollectiveVerdict run_analyzer(const AnalyzerRun& run);
/// Its output as it is, for `export` and `progress`; "" when it failed (`why` says how).
std::string run_analyzer_raw(const AnalyzerRun& run, std::string& why);

}  // namespace dtl::watch
