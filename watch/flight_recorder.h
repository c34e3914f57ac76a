// torch's flight recorder (FR): each rank's record of its collectives (process group, sequence
// number, operation, sizes, dtypes, state, times). What the workers' environment gains for it, the
// hook that answers for a rank whose main thread waits in a collective, the analyzer script that
// runs torch's own (fr_trace) on every rank's record, and its verdict: the collective where the
// ranks part; and the straggler watch, which names the rank that arrives last at the collectives.
// Pure; watch/recorder_reader.h asks the ranks and runs the analyzer.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"

namespace dtl::watch {

/// Where a rank's hook is asked and answers, in the rank's log folder (attempt_<N>/<local_rank>/).
struct RecorderFiles {
  std::string trigger;  ///< a FIFO the hook's thread waits on (DTLAUNCH_FR_TRIGGER)
  std::string status;   ///< its answer to a request: "<request id>\tok\t<its python>" or "<id>\tno\t<why>"
  std::string times;    ///< its collectives' arrival times (JSON), for the straggler watch
};
RecorderFiles recorder_files(const std::filesystem::path& rank_dir);

/// Where an attempt's records are, as the workers' variables leave them.
struct RecorderPaths {
  bool on = false;          ///< false: the user turned FR off (TORCH_FR_BUFFER_SIZE=0), or no watch
  std::string folder;       ///< a reading's records, `rank_<R>`, made anew for each: what the analyzer reads
  std::string dumps;        ///< torch's own dumps' folder where dtlaunch chose it (`<attempt>/fr`); "": the user's
  std::string dump_prefix;  ///< TORCH_FR_DUMP_TEMP_FILE in effect: torch's own dumps are `<it><rank>`
  std::string nccl_pipe;    ///< TORCH_NCCL_DEBUG_INFO_PIPE_FILE in effect: a rank's pipe is `<it><rank>.pipe`
};

/// The prefix of every record in RecorderPaths::folder, as torch's analyzer is told (`-p rank_`).
inline constexpr std::string_view kRecordPrefix = "rank_";

/// What every worker of an attempt gains for the flight recorder, and where that leaves the records.
/// `given`: the worker's environment otherwise (inherited, the config file's). Each of
/// TORCH_FR_BUFFER_SIZE (2000, torch 2.15's own default, for a torch whose default is 0),
/// TORCH_FR_DUMP_TEMP_FILE (`<attempt_dir>/fr/rank_`) and TORCH_NCCL_DEBUG_INFO_PIPE_FILE
/// (`<attempt_dir>/nccl_pipe_`) is set only where neither it nor its older name is; none is set
/// where the user turned FR off. Only the current names: torch 2.15 warns about the older ones. A
/// reading's records go to `<attempt_dir>/fr_read`.
std::pair<EnvPairs, RecorderPaths> recorder_variables(const EnvLookup& given, const std::filesystem::path& attempt_dir);

/// The part of the workers' sitecustomize.py that starts the hook's thread: it takes
/// DTLAUNCH_FR_TRIGGER out of the environment (a rank's Python children do not inherit it), and for
/// each request on that FIFO ("dump" or "times", the file to write, the status file, the request's
/// id) dumps the flight recorder of the rank's default group's backend without stacks, and writes
/// the answer.
std::string_view recorder_hook();

/// The analyzer dtlaunch writes into the run's folder and runs with the workers' Python:
/// `verdict DIR PREFIX` runs torch's fr_trace as a library on the records (their pg_config put
/// right first: torch 2.15's Gloo dumps name one group '' whatever their entries say, and fr_trace
/// then fails), and prints the first collective where the ranks part, as JSON; `export DIR PREFIX
/// BUDGET` prints each record's last entries (JSON lines, at most BUDGET bytes) for a node's part;
/// `import FILE DIR PREFIX` writes such lines as records into DIR, then prints their verdict.
std::string_view recorder_analyzer();

/// One rank's collective as its record has it.
struct RecordedCollective {
  long seq = -1;         ///< its collective sequence number in its process group
  std::string op;        ///< "all_reduce"
  std::string sizes;     ///< its input sizes, "[[4]]"
  std::string dtypes;    ///< its input dtypes, "Float"
  bool retired = false;  ///< it finished (on Gloo the one in flight is not)
};

/// torch's analyzer on every rank's record: the first collective where the ranks part.
struct CollectiveVerdict {
  std::string error;                     ///< why there is no verdict; "" when the analyzer ran
  std::string folder;                    ///< the records it read
  std::vector<int> ranks;                ///< the ranks with a record
  std::map<int, std::string> no_record;  ///< the ranks without one, and why
  int collectives = 0;                   ///< collectives the analyzer matched
  int problems = 0;                      ///< collectives where the ranks part
  int compared_with = -1;                ///< the rank whose record the analyzer compared the others with
  long seq = -1;                         ///< the first collective where the ranks part; -1: none
  std::string pg, pg_desc;               ///< its process group: "0", "0:default_pg"
  std::string kind;                      ///< fr_trace's MatchState ("COLLECTIVE_TYPE_MISMATCH"...) or "MISSING_RANKS"
  std::string detail;                    ///< fr_trace's words on it
  std::vector<int> expected, missing, culprits;
  std::map<int, RecordedCollective> entered;        ///< each rank's collective there
  std::map<int, RecordedCollective> never_entered;  ///< a rank that never entered it: its last before (seq -1: none)
  std::map<int, RecordedCollective> last;           ///< where the ranks never part: each rank's last collective
};

/// The analyzer's JSON as a verdict; `error` says why when it is not one.
CollectiveVerdict parse_verdict(const std::string& json);
/// The report's lines on it (each starting "dtlaunch: " or two spaces); "" with no rank's record.
std::string verdict_text(const CollectiveVerdict& v);
/// The same as a JSON object.
std::string verdict_json(const CollectiveVerdict& v);
/// The rank the verdict picks where stacks name none: the lowest culprit, else the lowest rank that
/// never entered the collective.
std::optional<int> verdict_suspect(const CollectiveVerdict& v);
/// Why the verdict picks `rank`, for the report's suspect line; "" when it does not.
std::string verdict_reason(const CollectiveVerdict& v, int rank);

/// A collective that has not completed: the oldest of the ranks', by the analyzer's `progress`.
struct Stall {
  int rank = 0;
  std::string pg;
  RecordedCollective collective;
  std::string state;  ///< its state in the record ("started", "scheduled")
  double age_s = 0;   ///< since the rank called it
};
/// The analyzer's `progress` JSON: the oldest collective not completed `timeout_s` or more after
/// its rank called it; nullopt when there is none, or the JSON is not that.
std::optional<Stall> find_stall(const std::string& json, double timeout_s);
/// The hang's cause it gives.
std::string stall_cause(const Stall& s);

// The straggler watch.
// A slow rank while the job runs. In synchronous training every collective waits for the last rank,
// so every rank's step takes as long and step times cannot name the slow one; when each rank
// arrives at the same collective can: the flight recorder's time_created_ns, its wall clock when
// the rank called the collective. Pure: the watch samples the arrivals (recorder_reader.h).

/// When a rank called one collective.
struct Arrival {
  std::string pg;  ///< its process group
  long seq = 0;    ///< its collective sequence number there
  int64_t ns = 0;  ///< wall clock
};
/// Each rank's arrivals at its last collectives, by rank.
using Arrivals = std::map<int, std::vector<Arrival>>;

/// The hook's "times" JSON ([[pg, seq, ns, name], ...]) as arrivals; empty when it is not that.
std::vector<Arrival> parse_arrivals(const std::string& json);

/// The rank that arrives last at most collectives.
struct Straggler {
  int rank = -1;
  std::string host;
  int last_at = 0;          ///< the collectives it arrived last at
  int of = 0;               ///< of the last ones every rank recorded
  double mean_late_ms = 0;  ///< how long after the next rank it arrived there, on average
  bool operator==(const Straggler&) const = default;
};

/// What counts as a slow rank.
struct StragglerRule {
  size_t last = 50;        ///< the collectives looked at: the last this many that every rank recorded
  size_t at_least = 10;    ///< fewer than this: no verdict yet
  double share = 2.0 / 3;  ///< it arrives last at this share of them at least
  double min_late_ms = 5;  ///< and this much after the next rank, on average
};

/// The slow rank among `arrivals` by `rule`; nullopt when there is none (an even job) or too few
/// collectives yet. Needs two ranks.
std::optional<Straggler> find_straggler(const Arrivals& arrivals, const StragglerRule& rule = {});

/// The warning line about a slow rank.
std::string straggler_warning(const Straggler& s);

/// When to say so: one warning line at most every `quiet`, and the latest verdict for a live view.
class StragglerState {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StragglerState(std::chrono::seconds quiet = std::chrono::minutes(5), StragglerRule rule = {});
  /// A sample of every rank's arrivals at `now`, on `host`: the warning to print, if it is time.
  std::optional<std::string> on_sample(Clock::time_point now, const Arrivals& arrivals, const std::string& host);
  /// The latest verdict: nullopt for an even job, or before the first one.
  const std::optional<Straggler>& latest() const { return latest_; }
  /// A new attempt: nothing seen before counts.
  void reset();
  /// A sample that could not be taken (a rank did not answer, or every rank is busy and quiet): the
  /// latest verdict no longer holds, though the warning's quiet time still runs.
  void unknown() { latest_.reset(); }

 private:
  std::chrono::seconds quiet_;
  StragglerRule rule_;
  std::optional<Straggler> latest_;
  std::optional<Clock::time_point> warned_at_;
};

}  // namespace dtl::watch
