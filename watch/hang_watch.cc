#include "watch/hang_watch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <set>

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "base/posix.h"
#include "base/printable.h"
#include "base/text.h"
#include "config/files.h"
#include "node/proc_stat.h"
#include "watch/flight_recorder.h"
#include "watch/hang_report.h"
#include "watch/stack_reader.h"
#include "watch/stacks.h"

namespace dtl::watch {
namespace asio = boost::asio;
using node::proc_usage;
using node::ProcUsage;

namespace {

constexpr auto kTick = std::chrono::seconds(1);
constexpr auto kStackTimeout = std::chrono::seconds(10);
constexpr auto kOnDemandWindow = std::chrono::milliseconds(250);  ///< `dtlaunch stacks`'s CPU window
constexpr auto kAnalyzerTimeout = std::chrono::seconds(60);       ///< torch's analyzer, importing torch first
constexpr auto kSampleEvery = std::chrono::seconds(10);           ///< the straggler watch's arrival times
/// How often the records' progress is read while every rank is busy and quiet: a tenth of the
/// timeout, from 2 s to 30 s, so that a job computing quietly pays little for it.
std::chrono::milliseconds progress_every(double hang_timeout_s) {
  return std::chrono::milliseconds(static_cast<long>(1000 * std::clamp(hang_timeout_s / 10, 2.0, 30.0)));
}

/// Writes to an eventfd: whatever watches it stops.
void poke(int fd) {
  const uint64_t one = 1;
  ssize_t ignored = ::write(fd, &one, sizeof one);
  (void)ignored;
}

/// The analyzer script's run by `python` with `args`, bounded as the watch's readers are.
AnalyzerRun analyzer_run(const std::string& python, const std::string& script, std::vector<std::string> args,
                         const ReadLimits& limits) {
  return {python,           script,           std::move(args),       kAnalyzerTimeout,
          limits.cancel_fd, limits.cgroup_fd, limits.cgroup_procs_fd};
}

/// Torch's analyzer run by `python` as `script args...` on the records in `folder`, with the ranks
/// that left none named; no run where no rank answered or the script could not be written.
CollectiveVerdict judge_records(const std::vector<RecordAnswer>& answers, const std::string& python,
                                const std::string& script, std::vector<std::string> args, const std::string& folder,
                                const ReadLimits& limits) {
  CollectiveVerdict v;
  if (std::none_of(answers.begin(), answers.end(), [](const auto& a) { return a.ok; })) {
    v.error = "no rank's record";
  } else if (script.empty()) {
    v.error = "dtlaunch could not write its analyzer into the run's folder";
  } else {
    v = run_analyzer(analyzer_run(python, script, std::move(args), limits));
  }
  v.folder = folder;
  for (const auto& a : answers) {
    if (!a.ok) v.no_record[a.rank] = a.why;
  }
  return v;
}

/// Torch's analyzer's verdict on the records `answers` left in `folder`.
CollectiveVerdict verdict_on(const std::vector<RecordAnswer>& answers, const std::vector<RecorderRank>& asked,
                             const std::string& script, const std::string& folder, const std::string& fallback,
                             const ReadLimits& limits) {
  // native ranks without NCCL's pipe (dtl-train on Gloo): nothing to say about records
  if (std::all_of(answers.begin(), answers.end(), [](const auto& a) { return !a.ok && a.why == kNotAsked; })) {
    return {};
  }
  return judge_records(answers, analyzer_python(answers, asked, fallback), script,
                       {"verdict", folder, std::string(kRecordPrefix)}, folder, limits);
}

/// Each rank's record, its last entries as JSON, into its `record` for a node's part.
void export_records(Hang& hang, const std::vector<RecordAnswer>& answers, const std::vector<RecorderRank>& asked,
                    const std::string& script, const std::string& folder, const std::string& fallback,
                    const ReadLimits& limits, size_t budget) {
  std::string why;
  const std::string lines =
      script.empty() ? ""
                     : run_analyzer_raw(
                           analyzer_run(analyzer_python(answers, asked, fallback), script,
                                        {"export", folder, std::string(kRecordPrefix), std::to_string(budget)}, limits),
                           why);
  std::map<int, std::string> by_rank;
  for (const auto& line : text::split(lines, '\n')) {
    constexpr std::string_view kHead = "{\"rank\":";  // the export writes each record's rank first
    if (!line.starts_with(kHead)) continue;
    const auto end = line.find(',', kHead.size());
    if (auto rank = text::to_long(line.substr(kHead.size(), end - kHead.size()))) {
      by_rank[static_cast<int>(*rank)] = line;
    }
  }
  for (auto& r : hang.ranks) {
    const auto answer = std::find_if(answers.begin(), answers.end(), [&](const auto& a) { return a.rank == r.rank; });
    if (auto it = by_rank.find(r.rank); it != by_rank.end()) {
      r.record = it->second;
    } else if (answer != answers.end() && !answer->ok) {
      r.record_error = answer->why;
    } else if (answer != answers.end()) {
      r.record_error = why.empty() ? "its record did not fit this node's part" : why;
    }
  }
}

}  // namespace

std::string nccl_timeout_cause(const std::string& value) {
  std::optional<long> rank;
  if (value.size() == sizeof(int32_t)) {
    int32_t raw = 0;
    std::memcpy(&raw, value.data(), sizeof raw);
    rank = raw;
  } else if (!value.empty() && value.size() < 10 && std::all_of(value.begin(), value.end(), ::isdigit)) {
    rank = std::stol(value);
  }
  return (rank ? "rank " + std::to_string(*rank) + "'s" : std::string("a rank's")) +
         " NCCL watchdog timed out a collective (exception_dump in the store)";
}

HangWatch::HangWatch(asio::io_context& io, WatchSettings settings, std::function<void(const std::string&)> print,
                     std::function<std::vector<Probe>()> probes,
                     std::function<void(const Probe&, const std::string&)> fail)
    : io_(io),
      settings_(std::move(settings)),
      print_(std::move(print)),
      probes_(std::move(probes)),
      fail_(std::move(fail)),
      timer_(io),
      watch_(std::chrono::milliseconds(static_cast<long>(settings_.hang_timeout_s * 1000))),
      alive_(std::make_shared<bool>(true)),
      socket_(io, [this](StacksSocket::Ask ask) { answer(ask); }) {
  tools_ = find_stack_tools(settings_.exec_path);
  if (settings_.hang_timeout_s <= 0) return;
  tools_.no_ptrace = ptrace_denied();
  // The workers' sitecustomize.py always holds the flight recorder's hook; faulthandler's is used
  // where Python ranks' stacks come from it: decided now, said once.
  const bool faulthandler = !tools_.no_ptrace.empty() || tools_.py_spy.empty();
  const auto dir = settings_.run_dir / "python";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string why_hook = !tools_.no_ptrace.empty() ? "ptrace is not allowed here (" + tools_.no_ptrace + ")"
                                                         : "py-spy is not installed (pip install py-spy)";
  if (auto why = config::write_file_atomically((dir / "sitecustomize.py").string(), site_customize(recorder_hook()));
      !why.empty()) {
    spdlog::warn("no flight recorder's record of Python ranks{}: {}",
                 faulthandler ? ", and no Python stacks of hung ranks: " + why_hook : std::string(), why);
    return;
  }
  site_dir_ = dir.string();
  const auto analyzer = settings_.run_dir / "flight_recorder_analyzer.py";
  if (auto why = config::write_file_atomically(analyzer.string(), std::string(recorder_analyzer())); why.empty()) {
    analyzer_ = analyzer.string();
  } else {
    spdlog::warn("no verdict from the flight recorder: {}", why);
  }
  if (!faulthandler) return;
  tools_.hook = true;
  // said when the workers first start: a launch refused before then has nothing to say about it
  hook_notice_ = why_hook +
                 ": a hung Python rank's stack comes from its faulthandler, which the workers register "
                 "on signal " +
                 std::to_string(stacks_signal()) + " (sitecustomize.py in " + site_dir_ +
                 ", first on their PYTHONPATH)";
}

EnvPairs HangWatch::worker_variables(const std::string& stacks_file, const EnvLookup& given) {
  if (settings_.hang_timeout_s <= 0 || site_dir_.empty()) return {};
  const auto rank_dir = std::filesystem::path(stacks_file).parent_path();
  auto [out, paths] = recorder_variables(given, rank_dir.parent_path());
  recorder_ = paths;
  bool hooked = false;
  if (paths.on) {
    // The hook's FIFO, made before the worker starts: a worker whose hook never opened it is told
    // from one that is busy by its missing reader.
    const auto trigger = recorder_files(rank_dir).trigger;
    std::error_code ec;
    std::filesystem::create_directories(rank_dir, ec);
    // torch's own dump on an NCCL timeout goes to TORCH_FR_DUMP_TEMP_FILE, and torch makes no folder
    if (!paths.dumps.empty()) std::filesystem::create_directories(paths.dumps, ec);
    std::filesystem::remove(trigger, ec);
    if (::mkfifo(trigger.c_str(), 0600) == 0) {
      out.emplace_back("DTLAUNCH_FR_TRIGGER", trigger);
      hooked = true;
    } else {
      spdlog::warn("no flight recorder's record of this worker: cannot make {}: {}", trigger, std::strerror(errno));
    }
  }
  if (tools_.hook) {
    out.emplace_back("DTLAUNCH_STACKS_SIGNAL", std::to_string(stacks_signal()));
    out.emplace_back("DTLAUNCH_STACKS_FILE", stacks_file);
    hooked = true;
  }
  if (hooked) {
    const auto python_path = given("PYTHONPATH");
    out.emplace_back("PYTHONPATH", python_path && !python_path->empty() ? site_dir_ + ":" + *python_path : site_dir_);
  }
  return out;
}

std::vector<RecorderRank> HangWatch::recorder_ranks(const std::vector<Probe>& probes) const {
  std::vector<RecorderRank> out;
  if (!recorder_.on) return out;
  // the hook's files are in the rank's log folder, beside its stacks file
  for (const auto& p : probes) {
    out.push_back({p.rank, p.pid, recorder_files(std::filesystem::path(p.stacks_file).parent_path())});
  }
  return out;
}

void HangWatch::cancel_reading() {
  if (cancel_) poke(cancel_->fd);
}

HangWatch::~HangWatch() {
  *alive_ = false;
  cancel_reading();  // the readers are killed, not waited for
  if (sample_cancel_) poke(sample_cancel_->fd);
  if (judge_cancel_) poke(judge_cancel_->fd);
  if (reader_.joinable()) reader_.join();  // its handler never runs now
  if (arrivals_.joinable()) arrivals_.join();
  if (judge_.joinable()) judge_.join();
}

void HangWatch::answer(const StacksSocket::Ask& ask) {
  if (job_wide_) {  // every node's ranks, through the rendezvous
    if (!ask.wanted()) return ask.reply("");
    return job_wide_->gather(
        [this, reply = ask.reply](const std::vector<std::string>& parts, const std::string& missing) {
          auto [merged_hang, unreadable] = merged(parts);
          const size_t nodes = parts.size() - unreadable;  // two nodes may go by one host name
          judge_parts(std::move(merged_hang), std::nullopt, [this, reply, missing, unreadable, nodes](Hang hang) {
            std::string text = "dtlaunch: the stacks of " + std::to_string(hang.ranks.size()) + " ranks on " +
                               std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + ":\n" +
                               stacks_text(hang, posix::host_name(), how()) + verdict_text(hang.collective);
            if (!missing.empty()) text += "dtlaunch: no stacks came from " + printable(missing, 400) + "\n";
            if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
            reply(text);
          });
        });
  }
  now(ask.wanted, [this, reply = ask.reply](std::optional<Hang> hang) {
    if (!hang) return reply("dtlaunch: no rank runs now\n");
    reply("dtlaunch: the stacks of " + std::to_string(hang->ranks.size()) + " ranks on " +
          printable(posix::host_name(), 200) + " (pid " + std::to_string(::getpid()) + "):\n" +
          stacks_text(*hang, posix::host_name(), how()) + verdict_text(hang->collective));
  });
}

void HangWatch::now(std::function<bool()> wanted, std::function<void(std::optional<Hang>)> done, Records records) {
  // a reading for a report, or the watch's asking of the ranks, is under way: after it (a hook
  // serves one request at a time)
  if (reading_ || sampling_) {
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, wanted, done, records, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) now(wanted, done, records);
    });
    return;
  }
  const auto probes = probes_();
  if (probes.empty()) return done(std::nullopt);
  // Each rank's CPU use over a short window, so a spinning rank shows as running.
  std::vector<ProcUsage> before;
  for (const auto& p : probes) before.push_back(proc_usage(p.pid));
  const auto from = HangClock::now();
  auto timer = std::make_shared<asio::steady_timer>(io_, kOnDemandWindow);
  timer->async_wait(
      [this, timer, wanted, done, probes, before, from, records, alive = alive_](const boost::system::error_code& ec) {
        if (ec || !*alive) return;
        if (reading_ || sampling_) return now(wanted, done, records);
        if (!wanted()) return done(std::nullopt);  // every client that asked has gone: reading pauses the ranks
        const auto at = HangClock::now();
        const double span = std::chrono::duration<double>(at - from).count();
        Hang hang;
        for (size_t i = 0; i < probes.size(); ++i) {
          const auto usage = proc_usage(probes[i].pid);
          HungRank r;
          r.rank = probes[i].rank;
          r.local_rank = probes[i].local_rank;
          r.pid = probes[i].pid;
          r.state = usage.state;
          r.cpu_percent = span > 0 ? 100 * (usage.cpu_s - before[i].cpu_s) / span : 0;
          r.busy = r.cpu_percent >= 20 && usage.state != 'D';
          r.quiet_s = std::chrono::duration<double>(at - probes[i].last_output).count();
          hang.quiet_s = i == 0 ? r.quiet_s : std::min(hang.quiet_s, r.quiet_s);
          hang.ranks.push_back(std::move(r));
        }
        read_stacks(
            std::move(hang), false,
            [done](Hang read) {
              find_suspect(read);  // fills what each rank is doing
              done(std::move(read));
            },
            records);
      });
}

void HangWatch::job_wide(std::optional<JobWide> hooks) { job_wide_ = std::move(hooks); }

void HangWatch::part(size_t budget, std::function<void(std::string)> done) {
  // The records get less than half of it: quoted in the part's JSON, they grow by a fifth.
  part_budget_ = budget * 2 / 5;
  now([] { return true; },
      [this, budget, done](std::optional<Hang> hang) {
        Hang h = hang.value_or(Hang{});
        if (!pending_cause_.empty()) h.cause = std::exchange(pending_cause_, "");
        done(hang_part(h, posix::host_name(), how(), budget));
      },
      Records::part);
}

std::pair<Hang, int> HangWatch::merged(const std::vector<std::string>& parts) const {
  std::vector<Hang> hangs;
  int unreadable = 0;
  for (const auto& p : parts) {
    if (auto h = parse_hang_part(p)) {
      hangs.push_back(std::move(*h));
    } else {
      ++unreadable;
    }
  }
  return {merge_parts(hangs), unreadable};
}

void HangWatch::judge_parts(Hang hang, std::optional<unsigned> current, std::function<void(Hang)> done) {
  if (current && *current != generation_) return;  // stop() or a new attempt came while it waited
  if (judging_) {                                  // the analyzer runs on another gathering's records: after it
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, hang = std::move(hang), current, done = std::move(done),
                       alive = alive_](const boost::system::error_code& ec) mutable {
      if (!ec && *alive) judge_parts(std::move(hang), current, std::move(done));
    });
    return;
  }
  std::string lines;
  std::vector<RecordAnswer> answers;
  for (auto& r : hang.ranks) {
    // a node's word: one line, the record of the rank it is sent for (the export writes the rank first)
    if (!r.record.empty() && (r.record.find('\n') != std::string::npos ||
                              !r.record.starts_with("{\"rank\":" + std::to_string(r.rank) + ","))) {
      r.record.clear();
      r.record_error = "its node sent a record that is not this rank's";
    }
    if (!r.record.empty()) lines += r.record + "\n";
    answers.push_back(
        {r.rank, !r.record.empty(), r.record_error.empty() ? "its node sent no record" : r.record_error, "", ""});
  }
  const bool asked = std::any_of(hang.ranks.begin(), hang.ranks.end(),
                                 [](const HungRank& r) { return !r.record.empty() || !r.record_error.empty(); });
  if (!asked) return done(std::move(hang));  // no node asked its ranks
  const auto folder = settings_.run_dir / ("attempt_" + std::to_string(attempt_)) / "fr_job";
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);  // the records of this gathering only
  std::filesystem::create_directories(folder, ec);
  const auto file = (folder / "parts.jsonl").string();
  std::string script = analyzer_;
  if (auto why = config::write_file_atomically(file, lines); !why.empty()) {
    spdlog::warn("no verdict from the flight recorder: {}", why);
    script.clear();
  }
  judging_ = true;
  if (judge_.joinable()) judge_.join();  // it has ended: its handler ran
  judge_cancel_ = std::make_shared<EventFd>();
  const std::string python = analyzer_python({}, recorder_ranks(probes_()), settings_.exec_path);
  const ReadLimits limits{kStackTimeout, judge_cancel_->fd, settings_.cgroup_fd, settings_.cgroup_procs_fd};
  judge_ = std::jthread([this, hang = std::move(hang), done = std::move(done), answers, file, script, python, limits,
                         records = (folder / "records").string(), cancel = judge_cancel_, alive = alive_,
                         current]() mutable {
    hang.collective =
        judge_records(answers, python, script, {"import", file, records, std::string(kRecordPrefix)}, records, limits);
    if (!*alive) return;
    asio::post(io_, [this, hang = std::move(hang), done = std::move(done), alive, current]() mutable {
      if (!*alive) return;
      judging_ = false;
      if (!current || *current == generation_) done(std::move(hang));
    });
  });
}

void HangWatch::job_report(const std::vector<std::string>& parts, const std::string& missing,
                           std::function<void(Verdict)> done) {
  auto [merged_hang, unreadable] = merged(parts);
  if (merged_hang.ranks.empty()) {
    spdlog::warn("the job hangs, but no node sent its ranks' stacks{}",
                 missing.empty() ? "" : " (none from " + printable(missing, 400) + ")");
    return done(std::nullopt);
  }
  judge_parts(std::move(merged_hang), generation_, [this, missing, unreadable, done](Hang hang) {
    keep_records(hang.collective);
    const auto suspect = choose_suspect(hang);
    const std::string host = posix::host_name();
    std::string text = hang_report(hang, suspect, host, how(), settings_.hang_timeout_s);
    if (!missing.empty()) text += "dtlaunch: no stacks came from " + printable(missing, 400) + "\n";
    if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
    print_(text);
    write_report(hang_report_json(hang, suspect, host, how(), settings_.hang_timeout_s));
    if (!settings_.on_hang_fail) return done(std::nullopt);
    // The suspect fails the job; without one, the lowest rank stands for it.
    const auto& r = hang.ranks[suspect.value_or(0)];
    if (!suspect)
      spdlog::warn("no suspect: rank {}, the lowest, stands for the job's failure (--on_hang=fail)", r.rank);
    done(std::pair{r.rank, failure_message(hang, suspect ? &r : nullptr)});
  });
}

void HangWatch::verdict(int rank, const std::string& message) {
  if (!settings_.on_hang_fail) return;
  for (const auto& p : probes_()) {
    if (p.rank == rank) return fail_(p, message);
  }
}

void HangWatch::write_report(const std::string& json) {
  const auto file =
      settings_.run_dir / ("attempt_" + std::to_string(attempt_)) / ("hang_" + std::to_string(++reports_) + ".json");
  if (auto why = config::write_file_atomically(file.string(), json); why.empty()) {
    wrote_report_ = true;
    spdlog::info("the hang's report is in {}", file.string());
  } else {
    spdlog::warn("cannot write the hang's report: {}", why);
  }
}

std::string HangWatch::failure_message(const Hang& hang, const HungRank* suspect) {
  // A rank alive after its traceback failed with that exception: it is the root cause's message.
  if (suspect && !suspect->traceback.empty()) {
    std::string tb = suspect->traceback;
    while (!tb.empty() && tb.back() == '\n') tb.pop_back();
    return tb;
  }
  return hang_failure(hang, suspect);
}

void HangWatch::signal(std::string cause) {
  if (!watching_) return;
  if (reading_ || sampling_) {  // a reading for the silence's report, or the ranks' asking, is under way: after it
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, cause, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) signal(cause);
    });
    return;
  }
  const auto probes = probes_();
  if (auto hang = watch_.on_signal(HangClock::now(), samples(probes), std::move(cause))) {
    if (job_wide_) {
      pending_cause_ = hang->cause;  // this node's part carries it to the job's report
      return job_wide_->hang_seen();
    }
    read_stacks(std::move(*hang), true, [this, probes](Hang read) { report(std::move(read), probes); });
  }
}

void HangWatch::start(int attempt) {
  if (settings_.hang_timeout_s <= 0) return;
  if (!hook_notice_.empty()) spdlog::info("{}", std::exchange(hook_notice_, ""));
  attempt_ = attempt;
  ++generation_;
  watch_.reset();
  pending_.reset();
  straggler_.reset();
  next_sample_ = HangClock::now() + kSampleEvery;
  next_progress_ = HangClock::now();
  watching_ = true;
  tick();
}

void HangWatch::stop() {
  watching_ = false;
  ++generation_;
  timer_.cancel();
  cancel_reading();  // a failure or a signal ends the job now, whatever a reader does
  if (sample_cancel_) poke(sample_cancel_->fd);
  if (judge_cancel_) poke(judge_cancel_->fd);
  pending_.reset();
}

void HangWatch::tick() {
  timer_.expires_after(kTick);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !watching_) return;
    auto probes = probes_();
    if (auto hang = watch_.on_sample(HangClock::now(), samples(probes)); hang && job_wide_) {
      spdlog::info("no rank here printed for {:.0f} s: the job's report comes from the node hosting the rendezvous",
                   hang->quiet_s);
      job_wide_->hang_seen();
    } else if (hang) {
      pending_ = std::move(*hang);  // read now, or once `dtlaunch stacks`'s reading is over
      pending_since_ = HangClock::now() - std::chrono::duration_cast<HangClock::duration>(
                                              std::chrono::duration<double>(pending_->quiet_s));
    }
    const auto now = HangClock::now();
    if (pending_ &&
        std::any_of(probes.begin(), probes.end(), [&](const Probe& p) { return p.last_output > pending_since_; })) {
      pending_.reset();  // a rank printed while it waited: that hang is over
    }
    if (reading_ || sampling_) {  // one asking of the ranks at a time: the rest waits for a later tick
    } else if (pending_) {
      read_stacks(*std::exchange(pending_, std::nullopt), true,
                  [this, probes](Hang read) { report(std::move(read), probes); });
    } else if (watch_.quietly_busy()) {
      if (now >= next_progress_) check_progress(probes);
    } else if (now >= next_sample_) {
      sample_arrivals(probes);
    }
    tick();
  });
}

std::vector<RankSample> HangWatch::samples(const std::vector<Probe>& probes) {
  std::vector<RankSample> out;
  const auto now = HangClock::now();
  for (const auto& p : probes) {
    const auto usage = proc_usage(p.pid);
    sampler_.record(p.pid, now, usage);  // for `dtlaunch top` and the metrics
    out.push_back({p.rank, p.local_rank, p.pid, usage.state, usage.cpu_s, p.last_output});
  }
  return out;
}

void HangWatch::sample_arrivals(const std::vector<Probe>& probes) {
  const auto ranks = recorder_ranks(probes);
  if (ranks.size() < 2) return;
  sampling_ = true;
  if (arrivals_.joinable()) arrivals_.join();
  sample_cancel_ = std::make_shared<EventFd>();
  arrivals_ = std::jthread([this, ranks, cancel = sample_cancel_, alive = alive_, generation = generation_] {
    Arrivals arrivals;
    for (const auto& [rank, json] : collect_times(ranks, {std::chrono::seconds(2), {}, cancel->fd})) {
      if (auto a = parse_arrivals(json); !a.empty()) arrivals[rank] = std::move(a);
    }
    if (!*alive) return;
    asio::post(io_, [this, arrivals = std::move(arrivals), alive, generation, asked = ranks.size()] {
      if (!*alive) return;
      sampling_ = false;
      next_sample_ = HangClock::now() + kSampleEvery;
      // a rank that did not answer may be the slow one (busy, holding its GIL): no verdict on the others alone
      if (generation != generation_) return;
      if (arrivals.size() < asked) return straggler_.unknown();
      if (auto warning = straggler_.on_sample(StragglerState::Clock::now(), arrivals, posix::host_name())) {
        spdlog::warn("{}", *warning);
      }
    });
  });
}

void HangWatch::check_progress(const std::vector<Probe>& probes) {
  straggler_.unknown();  // no arrivals are sampled meanwhile
  const auto ranks = recorder_ranks(probes);
  if (ranks.empty() || analyzer_.empty()) return;
  sampling_ = true;
  if (arrivals_.joinable()) arrivals_.join();
  sample_cancel_ = std::make_shared<EventFd>();
  // a folder of its own: a `dtlaunch stacks` reading may make fr_read anew meanwhile
  RecorderPaths paths = recorder_;
  paths.folder = (std::filesystem::path(paths.folder).parent_path() / "fr_progress").string();
  const ReadLimits limits{kStackTimeout, sample_cancel_->fd, settings_.cgroup_fd, settings_.cgroup_procs_fd};
  arrivals_ = std::jthread([this, ranks, paths, limits, script = analyzer_, fallback = settings_.exec_path,
                            timeout_s = settings_.hang_timeout_s, cancel = sample_cancel_, alive = alive_,
                            generation = generation_] {
    const auto answers = collect_records(ranks, paths, AskLimits{.cancel_fd = limits.cancel_fd});
    std::optional<Stall> stall;
    if (std::any_of(answers.begin(), answers.end(), [](const auto& a) { return a.ok; })) {
      const auto now_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      std::string why;
      stall = find_stall(
          run_analyzer_raw(
              analyzer_run(analyzer_python(answers, ranks, fallback), script,
                           {"progress", paths.folder, std::string(kRecordPrefix), std::to_string(now_ns)}, limits),
              why),
          timeout_s);
    }
    if (!*alive) return;
    asio::post(io_, [this, stall = std::move(stall), alive, generation] {
      if (!*alive) return;
      sampling_ = false;
      next_progress_ = HangClock::now() + progress_every(settings_.hang_timeout_s);
      // still quiet and busy: a rank that printed meanwhile made progress
      if (stall && generation == generation_ && watch_.quietly_busy()) signal(stall_cause(*stall));
    });
  });
}

void HangWatch::read_stacks(Hang hang, bool current, std::function<void(Hang)> done, Records records) {
  reading_ = true;
  if (reader_.joinable()) reader_.join();
  cancel_ = std::make_shared<EventFd>();
  std::map<pid_t, std::string> hook_files;
  const auto probes = probes_();
  // The ranks' flight recorders are asked meanwhile: only the ranks read for this hang.
  std::vector<RecorderRank> asked;
  for (const auto& r : recorder_ranks(probes)) {
    if (std::any_of(hang.ranks.begin(), hang.ranks.end(), [&](const HungRank& h) { return h.pid == r.pid; })) {
      asked.push_back(r);
    }
  }
  for (const auto& p : probes) {
    hook_files[p.pid] = p.stacks_file;
    for (auto& r : hang.ranks) {
      if (r.pid == p.pid) r.traceback = p.traceback;
    }
  }
  const ReadLimits limits{kStackTimeout, cancel_->fd, settings_.cgroup_fd, settings_.cgroup_procs_fd};
  reader_ = std::jthread([this, hang = std::move(hang), done = std::move(done), alive = alive_, current,
                          generation = generation_, tools = tools_, limits, hook_files, cancel = cancel_, asked,
                          paths = recorder_, script = analyzer_, fallback = settings_.exec_path, records,
                          budget = part_budget_]() mutable {
    std::future<std::vector<RecordAnswer>> answers;
    if (!asked.empty()) {
      answers = std::async(std::launch::async, collect_records, asked, paths, AskLimits{.cancel_fd = limits.cancel_fd});
    }
    std::vector<std::future<Stacks>> reads;
    for (const auto& r : hang.ranks) {
      if (r.state == 'T' || r.state == 't') {  // a stopped process answers no reader: eu-stack waits for ever
        reads.push_back(std::async(std::launch::deferred, [] {
          return Stacks{{}, {}, "it is stopped (SIGSTOP, or a debugger holds it): not read", "", 0};
        }));
        continue;
      }
      const std::string file = hook_files.contains(r.pid) ? hook_files.at(r.pid) : "";
      reads.push_back(std::async(std::launch::async, read_rank, std::cref(tools), r.pid, file, limits));
    }
    for (size_t i = 0; i < reads.size(); ++i) {
      auto read = reads[i].get();
      auto& r = hang.ranks[i];
      r.stack = without_hook_thread(read.stack);
      r.native = std::move(read.native);
      r.stack_error = std::move(read.error);
      r.stack_by = std::move(read.by);
      r.read_pid = read.read_pid;
    }
    if (answers.valid()) {
      const auto got = answers.get();
      if (records == Records::part) {
        export_records(hang, got, asked, script, paths.folder, fallback, limits, budget);
      } else {
        hang.collective = verdict_on(got, asked, script, paths.folder, fallback, limits);
      }
    }
    if (!*alive) return;
    asio::post(io_, [this, hang = std::move(hang), done = std::move(done), alive, current, generation]() mutable {
      if (!*alive) return;
      reading_ = false;
      if (!current || generation == generation_) done(std::move(hang));
    });
  });
}

std::string HangWatch::how() const {
  if (tools_.hook) return "faulthandler";
  return settings_.python_workers && !tools_.py_spy.empty() ? "py-spy" : "eu-stack";
}

void HangWatch::keep_records(CollectiveVerdict& v) {
  if (v.folder.empty()) return;
  // the report's records, kept from the next reading (`dtlaunch stacks`), which makes its folder anew
  const auto kept = settings_.run_dir / ("attempt_" + std::to_string(attempt_)) /
                    ("hang_" + std::to_string(reports_ + 1) + "_records");
  std::error_code ec;
  std::filesystem::remove_all(kept, ec);
  std::filesystem::rename(v.folder, kept, ec);
  if (!ec) v.folder = kept.string();
}

void HangWatch::report(Hang hang, const std::vector<Probe>& probes) {
  keep_records(hang.collective);
  const auto suspect = find_suspect(hang);
  const std::string host = posix::host_name();
  print_(hang_report(hang, suspect, host, how(), settings_.hang_timeout_s));
  write_report(hang_report_json(hang, suspect, host, how(), settings_.hang_timeout_s));
  if (!settings_.on_hang_fail) return;
  // The suspect fails the group; without one, the lowest rank stands for the job.
  const auto& r = hang.ranks[suspect.value_or(0)];
  if (!suspect) spdlog::warn("no suspect: rank {}, the lowest, stands for the job's failure (--on_hang=fail)", r.rank);
  for (const auto& p : probes) {
    if (p.pid == r.pid) return fail_(p, failure_message(hang, suspect ? &r : nullptr));
  }
}

}  // namespace dtl::watch
