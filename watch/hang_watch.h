// The watch for hangs over one node's workers (watch/hang_state.h decides): once a second it
// reads each rank's state and CPU time, with its children's, from /proc, and the time of its last
// output; once the job counts as hung, or signal() says so, it reads every rank's stack (py-spy for
// Python, with native frames for CUDA ranks it cannot place; eu-stack for others) on a thread of its own, so
// supervision goes on meanwhile, then prints the report, writes it as JSON into the run's log folder, and with
// --on_hang=fail hands the suspect's failure back. It also answers `dtlaunch stacks` (watch/stacks_socket.h) with
// every rank's stack now. With each reading it asks every rank for torch's flight recorder
// (watch/recorder_reader.h) and has torch's analyzer name the collective where the ranks part; while
// the job runs it compares when the ranks arrive at the same collectives (the straggler watch,
// watch/flight_recorder.h), and while every rank is busy and none prints (NCCL's ranks spin as they
// wait) a collective not completed for the timeout is a hang.
#pragma once

#include <sys/eventfd.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/env.h"
#include "watch/flight_recorder.h"
#include "watch/hang_state.h"
#include "watch/rank_sampler.h"
#include "watch/recorder_reader.h"
#include "watch/stack_reader.h"
#include "watch/stacks_socket.h"

namespace dtl::watch {

/// What the watch takes from the launch.
struct WatchSettings {
  double hang_timeout_s = 0;      ///< 0: no watch
  bool on_hang_fail = false;      ///< the suspect fails the group (--on_hang=fail)
  bool python_workers = true;     ///< the program is Python (not --no_python): for messages only
  std::string exec_path;          ///< the workers' program: py-spy may lie beside an interpreter
  std::filesystem::path run_dir;  ///< the run's log folder: reports, and the faulthandler hook
  int cgroup_fd = -1;             ///< the job's cgroup, where stack readers run too; -1: none
  int cgroup_procs_fd = -1;
};

class HangWatch {
 public:
  struct Probe {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = 0;
    HangClock::time_point last_output;
    std::string error_file;   ///< its TORCHELASTIC_ERROR_FILE, read for the failure's traceback
    std::string stacks_file;  ///< its DTLAUNCH_STACKS_FILE, where the faulthandler hook writes
    std::string traceback;    ///< its last output was this traceback (watch/traceback.h)
  };
  /// `print`: text for dtlaunch's stderr. `probes`: the running workers now. `fail`: with
  /// --on_hang=fail, the suspect (or the rank standing for the job) and why it fails.
  HangWatch(boost::asio::io_context& io, WatchSettings settings, std::function<void(const std::string&)> print,
            std::function<std::vector<Probe>()> probes, std::function<void(const Probe&, const std::string&)> fail);
  ~HangWatch();

  /// Watches a new attempt (`attempt`: its restart count); does nothing with --hang_timeout=0.
  void start(int attempt);
  void stop();
  /// The job hangs by another's word (`cause`: torch's NCCL watchdog timed out a collective): the
  /// report now, once per attempt, and with --on_hang=fail the suspect's failure.
  void signal(std::string cause);
  /// What a worker's environment gains from the watch (none with --hang_timeout=0): the flight
  /// recorder's variables (recorder_variables) and DTLAUNCH_FR_TRIGGER, a FIFO made here beside
  /// `stacks_file` (in the rank's log folder), unless the user turned the recorder off; where ptrace
  /// is not allowed or py-spy is missing (a probe at start says), DTLAUNCH_STACKS_SIGNAL and
  /// DTLAUNCH_STACKS_FILE (`stacks_file`); and with either, PYTHONPATH led by the folder of
  /// dtlaunch's sitecustomize.py, whose hooks take them. `given`: the worker's environment otherwise.
  EnvPairs worker_variables(const std::string& stacks_file, const EnvLookup& given);
  /// The slow rank on this node now, by the flight recorder's arrival times (nullopt: an even job,
  /// or none seen yet), for a live view; a warning line says it at most every 5 minutes.
  const std::optional<Straggler>& straggler() const { return straggler_.latest(); }
  /// A job over several nodes: its report and `dtlaunch stacks` cover every node, gathered by the
  /// node hosting the rendezvous (rendezvous/protocol.h's StacksWanted and HangVerdict).
  struct JobWide {
    /// This node's watch found a hang: the host is to gather the job's report.
    std::function<void()> hang_seen;
    /// Every node's part, for `dtlaunch stacks`: `done` runs once all came or the time is up.
    std::function<void(std::function<void(const std::vector<std::string>& parts, const std::string& missing)> done)>
        gather;
  };
  /// Set for a round of several nodes; nullopt: this node's ranks are the job's.
  void job_wide(std::optional<JobWide> hooks);
  /// This node's part of the job's stacks now, at most `budget` bytes: `done` gets it.
  void part(size_t budget, std::function<void(std::string)> done);
  /// On the node hosting the rendezvous, every node's part of a hang: prints the job's report (with
  /// torch's analyzer's verdict on every node's flight recorder records, a few seconds later) and
  /// writes it; then `done` gets, with --on_hang=fail, the rank that every node is to fail and the
  /// failure's message.
  using Verdict = std::optional<std::pair<int, std::string>>;
  void job_report(const std::vector<std::string>& parts, const std::string& missing, std::function<void(Verdict)> done);
  /// The job's verdict: `rank` fails here, if it runs here (--on_hang=fail).
  void verdict(int rank, const std::string& message);
  /// Whether a report went into the log folder (which is then worth keeping).
  bool wrote_report() const { return wrote_report_; }
  /// Each rank's newest /proc sample, which `dtlaunch top` and the metrics read too.
  RankSampler& sampler() { return sampler_; }
  /// `dtlaunch top`'s ask on the job's socket goes to `ranks` (watch/live_figures.h).
  void answer_ranks(std::function<void(StacksSocket::Reply)> ranks) { socket_.answer_ranks(std::move(ranks)); }

 private:
  void tick();
  std::vector<RankSample> samples(const std::vector<Probe>& probes);
  /// What a reading does with the ranks' flight recorders besides: torch's analyzer's verdict into
  /// hang.collective (one node's job), or each rank's record into its `record` (a node's part).
  enum class Records { verdict, part };
  /// Reads every rank's stack and flight recorder into `hang` on the reader thread, then runs `done`
  /// on the event loop (not after stop() or a new attempt, when `current` is set).
  void read_stacks(Hang hang, bool current, std::function<void(Hang)> done, Records records = Records::verdict);
  /// Torch's analyzer on the records in the parts of `hang` (a job of several nodes), on a thread of
  /// its own, one run at a time; then `done` on the event loop with hang.collective filled (not
  /// after stop() or a new attempt, when `current` holds the generation it is for).
  void judge_parts(Hang hang, std::optional<unsigned> current, std::function<void(Hang)> done);
  /// A report's records moved out of the reading's folder, which the next reading makes anew.
  void keep_records(CollectiveVerdict& v);
  /// The ranks to ask for their flight recorder: every probe's (its hook's files beside its stacks').
  std::vector<RecorderRank> recorder_ranks(const std::vector<Probe>& probes) const;
  /// The straggler watch: every rank's arrival times, now and then (tick), on a thread of its own.
  void sample_arrivals(const std::vector<Probe>& probes);
  /// While every rank is busy and none prints (NCCL's ranks spin as they wait): every rank's
  /// record, on the same thread; a collective not completed for the timeout is the hang's signal().
  void check_progress(const std::vector<Probe>& probes);
  void report(Hang hang, const std::vector<Probe>& probes);
  /// Every rank's stack now, CPU over a short window, `doing` filled; nullopt when none runs, or
  /// when no one `wanted` it any more once the window was over (no stack is read then).
  void now(std::function<bool()> wanted, std::function<void(std::optional<Hang>)> done,
           Records records = Records::verdict);
  /// Parts parsed and merged; how many could not be read.
  std::pair<Hang, int> merged(const std::vector<std::string>& parts) const;
  void write_report(const std::string& json);
  static std::string failure_message(const Hang& hang, const HungRank* suspect);
  std::string how() const;                    ///< which tool reads the stacks
  void cancel_reading();                      ///< the readers of a reading under way are killed
  void answer(const StacksSocket::Ask& ask);  ///< `dtlaunch stacks`

  boost::asio::io_context& io_;
  const WatchSettings settings_;
  std::function<void(const std::string&)> print_;
  std::function<std::vector<Probe>()> probes_;
  std::function<void(const Probe&, const std::string&)> fail_;
  boost::asio::steady_timer timer_;
  HangState watch_;
  bool watching_ = false;
  bool reading_ = false;                 ///< the stack reader's thread is busy
  bool judging_ = false;                 ///< the analyzer's thread on every node's records is busy
  std::optional<Hang> pending_;          ///< a hang found while `dtlaunch stacks`'s reading ran: read after it
  HangClock::time_point pending_since_;  ///< its ranks' last output: one printed since ends it
  int attempt_ = 0;
  int reports_ = 0;
  bool wrote_report_ = false;
  unsigned generation_ = 0;  ///< a stack reading from an earlier attempt is dropped
  StackTools tools_;         ///< how stacks are read here, decided at start
  std::string site_dir_;     ///< the folder of dtlaunch's sitecustomize.py, with the hook
  std::string hook_notice_;  ///< the line that says so, for the workers' first start
  std::string analyzer_;     ///< the analyzer script in the run's folder (watch/flight_recorder.h); "": none
  RecorderPaths recorder_;   ///< where this attempt's flight recorder records are (off: not asked)
  StragglerState straggler_;
  bool sampling_ = false;   ///< the arrivals' thread is busy
  size_t part_budget_ = 0;  ///< what a node's part may give its ranks' records
  HangClock::time_point next_sample_;
  HangClock::time_point next_progress_;
  /// An eventfd the current reading's readers watch: written, they end at once.
  struct EventFd {
    EventFd() : fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
    ~EventFd() {
      if (fd >= 0) ::close(fd);
    }
    int fd;
  };
  std::shared_ptr<EventFd> cancel_;
  std::shared_ptr<EventFd> sample_cancel_;  ///< the arrivals' asking under way
  std::shared_ptr<EventFd> judge_cancel_;   ///< the job's verdict under way
  std::optional<JobWide> job_wide_;
  std::string pending_cause_;  ///< a signalled hang's cause, for this node's next part
  std::shared_ptr<bool> alive_;
  RankSampler sampler_;
  StacksSocket socket_;  ///< `dtlaunch stacks`'s way in
  std::jthread reader_;
  std::jthread arrivals_;  ///< the straggler watch's asking
  std::jthread judge_;     ///< torch's analyzer on every node's records
};

/// The hang's cause from exception_dump's value: the global rank whose NCCL watchdog timed out, as
/// torch writes it (4 bytes, the int32 as it lies in memory), or as text.
std::string nccl_timeout_cause(const std::string& value);

}  // namespace dtl::watch
