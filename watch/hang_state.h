// When a job is hung, apart from processes and clocks: what a sample of the ranks says (HangState).
// watch/hang_watch.h samples the workers and reads their stacks; watch/stacks.h says what a stack
// means, watch/hang_report.h writes the report.
//
// A hang: for the timeout no rank printed, and not every rank was busy on a CPU. Either no rank made
// progress, or some did (a rank spinning in a loop) while the others waited for them. A job whose
// every rank computes quietly is not hung; a rank that printed a traceback and lives on is.
// Or a hang is signalled: torch's NCCL watchdog timed a collective out and said so in the store.
// NCCL's waits spin on a CPU, so a rank waiting for the GPU looks busy: only its native stack
// (cuStreamSynchronize under .item()) tells it from a rank that computes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "watch/flight_recorder.h"

namespace dtl::watch {

using HangClock = std::chrono::steady_clock;

/// One rank as /proc and its output show it at one moment.
struct RankSample {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  char state = 'S';                   ///< /proc/PID/stat's: R, S, D, Z, T...
  double cpu_s = 0;                   ///< CPU time of the rank and its children so far
  HangClock::time_point last_output;  ///< its last output, or its start
};

/// A rank in a hang report.
struct HungRank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  char state = 'S';
  double cpu_percent = 0;           ///< over the watch's window
  double quiet_s = 0;               ///< since its last output
  bool busy = false;                ///< a fifth of a CPU over the window, or runnable (R) in half its samples
  std::string doing;                ///< what its stack says (classify), or "running" / "blocked" from /proc
  std::vector<std::string> stack;   ///< "function (file:line)", innermost first, threads apart by ""
  std::string stack_error;          ///< why there is no stack
  std::vector<std::string> native;  ///< the same with native frames, where they were read (CUDA ranks)
  std::string stack_by;             ///< the tool that read it, where it is not the report's own
  std::string host;                 ///< the node it runs on, where it is not the report's own
  std::string traceback;            ///< its last output was this traceback, and it lives on
  pid_t read_pid = 0;               ///< the process read, where not the rank's own (the Python under a wrapper)
  std::string record;               ///< its flight recorder's last entries (JSON), in a node's part of a job's report
  std::string record_error;         ///< why it has no record there
};

struct Hang {
  double quiet_s = 0;  ///< since the last output of any rank
  std::vector<HungRank> ranks;
  std::string cause;  ///< what signalled it ("" for the silence): "rank 0's NCCL watchdog timed out a collective"
  CollectiveVerdict collective;  ///< torch's analyzer on every rank's flight recorder, where they were read
};

class HangState {
 public:
  /// `timeout`: how long no rank may print. The CPU use that tells busy from blocked is measured
  /// over the last `window` of it (at most the timeout).
  explicit HangState(std::chrono::milliseconds timeout, std::chrono::milliseconds window = std::chrono::seconds(10));

  /// Every running rank at `now`. Returns the hang when the job has just become hung: once per
  /// hang, until a rank prints again or every rank is busy.
  std::optional<Hang> on_sample(HangClock::time_point now, const std::vector<RankSample>& ranks);
  /// Whether the last sample found every rank busy and none printing for the timeout: NCCL's ranks
  /// spin while they wait, so the flight recorder's progress is to tell (watch/hang_watch.h).
  bool quietly_busy() const { return quietly_busy_; }
  /// Something outside the samples says the job hangs (`cause`): the hang at once, with the CPU use
  /// seen so far, once per attempt. The silence rule then stays quiet for the attempt: the ranks'
  /// own reports of the timeout are output, not progress.
  std::optional<Hang> on_signal(HangClock::time_point now, const std::vector<RankSample>& ranks, std::string cause);

  /// A new attempt: nothing heard before counts.
  void reset();

 private:
  struct Seen {
    std::vector<std::pair<HangClock::time_point, double>> cpu;    ///< samples inside the window
    std::deque<std::pair<HangClock::time_point, bool>> runnable;  ///< whether it was runnable (R), in the window
  };
  /// Records the samples; returns the newest output of any rank.
  HangClock::time_point record(HangClock::time_point now, const std::vector<RankSample>& ranks);
  /// The ranks with their CPU use over what was seen of the window.
  Hang snapshot(HangClock::time_point now, HangClock::time_point last, const std::vector<RankSample>& ranks);
  std::chrono::milliseconds timeout_, window_;
  std::map<pid_t, Seen> seen_;
  std::optional<HangClock::time_point> reported_at_;  ///< the last output when the hang was reported
  bool signalled_ = false;                            ///< on_signal reported this attempt's hang
  bool quietly_busy_ = false;                         ///< the last sample: every rank busy, none printing
};

}  // namespace dtl::watch
