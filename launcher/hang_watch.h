// Hangs, apart from processes and clocks: what a sample of the ranks says (HangWatch), what a stack
// says a rank is doing, and the report. launcher/hang_watcher.h samples the workers and reads their
// stacks; this decides.
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
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtl::launcher {

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
  bool busy = false;                ///< it used at least a fifth of a CPU over the window
  std::string doing;                ///< what its stack says (classify), or "running" / "blocked" from /proc
  std::vector<std::string> stack;   ///< "function (file:line)", innermost first, threads apart by ""
  std::string stack_error;          ///< why there is no stack
  std::vector<std::string> native;  ///< the same with native frames, where they were read (CUDA ranks)
  std::string stack_by;             ///< the tool that read it, where it is not the report's own
  std::string host;                 ///< the node it runs on, where it is not the report's own
};

struct Hang {
  double quiet_s = 0;  ///< since the last output of any rank
  std::vector<HungRank> ranks;
  std::string cause;  ///< what signalled it ("" for the silence): "rank 0's NCCL watchdog timed out a collective"
};

class HangWatch {
 public:
  /// `timeout`: how long no rank may print. The CPU use that tells busy from blocked is measured
  /// over the last `window` of it (at most the timeout).
  explicit HangWatch(std::chrono::milliseconds timeout, std::chrono::milliseconds window = std::chrono::seconds(10));

  /// Every running rank at `now`. Returns the hang when the job has just become hung: once per
  /// hang, until a rank prints again or every rank is busy.
  std::optional<Hang> on_sample(HangClock::time_point now, const std::vector<RankSample>& ranks);
  /// Something outside the samples says the job hangs (`cause`): the hang at once, with the CPU use
  /// seen so far, once per attempt. The silence rule then stays quiet for the attempt: the ranks'
  /// own reports of the timeout are output, not progress.
  std::optional<Hang> on_signal(HangClock::time_point now, const std::vector<RankSample>& ranks, std::string cause);

  /// A new attempt: nothing heard before counts.
  void reset();

 private:
  struct Seen {
    std::vector<std::pair<HangClock::time_point, double>> cpu;  ///< samples inside the window
  };
  /// Records the samples; returns the newest output of any rank.
  HangClock::time_point record(HangClock::time_point now, const std::vector<RankSample>& ranks);
  /// The ranks with their CPU use over what was seen of the window.
  Hang snapshot(HangClock::time_point now, HangClock::time_point last, const std::vector<RankSample>& ranks);
  std::chrono::milliseconds timeout_, window_;
  std::map<pid_t, Seen> seen_;
  std::optional<HangClock::time_point> reported_at_;  ///< the last output when the hang was reported
  bool signalled_ = false;                            ///< on_signal reported this attempt's hang
};

/// What a rank is doing by its frames (innermost first): "in a collective", "in the store",
/// "waiting for the GPU" (native frames only), "in a data loader", or "" when none of them.
std::string classify(const std::vector<std::string>& stack);

/// Fills each rank's `doing` (from its native stack where read, else its stack, else "running" when
/// busy, "blocked" when not) and returns the suspect's index in hang.ranks: the first rank that
/// waits neither in a collective, nor in the store, nor for the GPU, busy ones first; nullopt when
/// every rank waits.
std::optional<size_t> find_suspect(Hang& hang);
/// The same choice over ranks whose `doing` is filled already (other nodes' parts).
std::optional<size_t> choose_suspect(const Hang& hang);

/// One node's ranks, `doing` filled, for the job's report on the node hosting the rendezvous: the
/// report's JSON without a verdict, each rank naming `host`, within `budget` bytes (the stacks
/// cut to their main threads, then to fewer frames, then left out).
std::string hang_part(const Hang& hang, const std::string& host, const std::string& how, size_t budget);
/// A node's part back; nullopt when it is not one.
std::optional<Hang> parse_hang_part(const std::string& json);
/// Every node's ranks as one hang, by rank: the shortest silence, the first cause.
Hang merge_parts(const std::vector<Hang>& parts);

/// py-spy's `dump --json` output as stacks: "thread NAME", then its frames, "name (file:line)",
/// innermost first, threads apart by an empty line. nullopt when it is not py-spy's JSON.
std::optional<std::vector<std::string>> parse_py_spy(const std::string& json);
/// faulthandler's dump (Python's own, from a signal: "Thread 0x... (most recent call first):", then
/// `  File "PATH", line N in FUNC`) the same way: the thread that took the signal, which dtlaunch
/// sends to the main thread, is "thread MainThread", the others "thread 1", "thread 2"... in order.
/// Empty when it holds no thread.
std::vector<std::string> parse_faulthandler(const std::string& text);
/// eu-stack's output the same way ("#0  0x... function" lines), threads named 1, 2, ... in order.
std::vector<std::string> parse_eu_stack(const std::vector<std::string>& lines);

/// The table and every rank's stack (ranks with the same stack as one block), as both reports
/// have them; `dtlaunch stacks` prints it under its own headline.
std::string stacks_text(const Hang& hang, const std::string& host, const std::string& how);

/// The report for the console: a headline, the table, every rank's stack (ranks with the same stack
/// as one block) and the verdict. `how`: which tool read the stacks.
std::string hang_report(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                        const std::string& how, double timeout_s);
/// The same as one JSON object.
std::string hang_report_json(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                             const std::string& how, double timeout_s);

}  // namespace dtl::launcher
