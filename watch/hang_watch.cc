#include "watch/hang_watch.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <future>
#include <set>

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "base/posix.h"
#include "base/printable.h"
#include "config/files.h"
#include "node/proc_stat.h"
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
  if (tools_.no_ptrace.empty() && !tools_.py_spy.empty()) return;
  // Python ranks' stacks come from their own faulthandler then: decided now, said once.
  const auto dir = settings_.run_dir / "python";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string why_hook = !tools_.no_ptrace.empty() ? "ptrace is not allowed here (" + tools_.no_ptrace + ")"
                                                         : "py-spy is not installed (pip install py-spy)";
  if (auto why = config::write_file_atomically((dir / "sitecustomize.py").string(), std::string(site_customize()));
      !why.empty()) {
    spdlog::warn("no Python stacks of hung ranks: {}, and {}", why_hook, why);
    return;
  }
  site_dir_ = dir.string();
  tools_.hook = true;
  // said when the workers first start: a launch refused before then has nothing to say about it
  hook_notice_ = why_hook +
                 ": a hung Python rank's stack comes from its faulthandler, which the workers register "
                 "on signal " +
                 std::to_string(stacks_signal()) + " (sitecustomize.py in " + site_dir_ +
                 ", first on their PYTHONPATH)";
}

EnvPairs HangWatch::worker_variables(const std::string& stacks_file,
                                     const std::optional<std::string>& python_path) const {
  if (site_dir_.empty()) return {};
  return {{"PYTHONPATH", python_path && !python_path->empty() ? site_dir_ + ":" + *python_path : site_dir_},
          {"DTLAUNCH_STACKS_SIGNAL", std::to_string(stacks_signal())},
          {"DTLAUNCH_STACKS_FILE", stacks_file}};
}

void HangWatch::cancel_reading() {
  if (cancel_) {
    const uint64_t one = 1;
    ssize_t ignored = ::write(cancel_->fd, &one, sizeof one);
    (void)ignored;
  }
}

HangWatch::~HangWatch() {
  *alive_ = false;
  cancel_reading();                        // the readers are killed, not waited for
  if (reader_.joinable()) reader_.join();  // its handler never runs now
}

void HangWatch::answer(const StacksSocket::Ask& ask) {
  if (job_wide_) {  // every node's ranks, through the rendezvous
    if (!ask.wanted()) return ask.reply("");
    return job_wide_->gather(
        [this, reply = ask.reply](const std::vector<std::string>& parts, const std::string& missing) {
          auto [hang, unreadable] = merged(parts);
          const size_t nodes = parts.size() - unreadable;  // two nodes may go by one host name
          std::string text = "dtlaunch: the stacks of " + std::to_string(hang.ranks.size()) + " ranks on " +
                             std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + ":\n" +
                             stacks_text(hang, posix::host_name(), how());
          if (!missing.empty()) text += "dtlaunch: no stacks came from " + printable(missing, 400) + "\n";
          if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
          reply(text);
        });
  }
  now(ask.wanted, [this, reply = ask.reply](std::optional<Hang> hang) {
    if (!hang) return reply("dtlaunch: no rank runs now\n");
    reply("dtlaunch: the stacks of " + std::to_string(hang->ranks.size()) + " ranks on " +
          printable(posix::host_name(), 200) + " (pid " + std::to_string(::getpid()) + "):\n" +
          stacks_text(*hang, posix::host_name(), how()));
  });
}

void HangWatch::now(std::function<bool()> wanted, std::function<void(std::optional<Hang>)> done) {
  if (reading_) {  // a reading for a report is under way: after it
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, wanted, done, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) now(wanted, done);
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
      [this, timer, wanted, done, probes, before, from, alive = alive_](const boost::system::error_code& ec) {
        if (ec || !*alive) return;
        if (reading_) return now(wanted, done);
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
        read_stacks(std::move(hang), false, [done](Hang read) {
          find_suspect(read);  // fills what each rank is doing
          done(std::move(read));
        });
      });
}

void HangWatch::job_wide(std::optional<JobWide> hooks) { job_wide_ = std::move(hooks); }

void HangWatch::part(size_t budget, std::function<void(std::string)> done) {
  now([] { return true; },
      [this, budget, done](std::optional<Hang> hang) {
        Hang h = hang.value_or(Hang{});
        if (!pending_cause_.empty()) h.cause = std::exchange(pending_cause_, "");
        done(hang_part(h, posix::host_name(), how(), budget));
      });
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

std::optional<std::pair<int, std::string>> HangWatch::job_report(const std::vector<std::string>& parts,
                                                                 const std::string& missing) {
  auto [hang, unreadable] = merged(parts);
  if (hang.ranks.empty()) {
    spdlog::warn("the job hangs, but no node sent its ranks' stacks{}",
                 missing.empty() ? "" : " (none from " + printable(missing, 400) + ")");
    return std::nullopt;
  }
  const auto suspect = choose_suspect(hang);
  const std::string host = posix::host_name();
  std::string text = hang_report(hang, suspect, host, how(), settings_.hang_timeout_s);
  if (!missing.empty()) text += "dtlaunch: no stacks came from " + printable(missing, 400) + "\n";
  if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
  print_(text);
  write_report(hang_report_json(hang, suspect, host, how(), settings_.hang_timeout_s));
  if (!settings_.on_hang_fail) return std::nullopt;
  // The suspect fails the job; without one, the lowest rank stands for it.
  const auto& r = hang.ranks[suspect.value_or(0)];
  if (!suspect) spdlog::warn("no suspect: rank {}, the lowest, stands for the job's failure (--on_hang=fail)", r.rank);
  return std::pair{r.rank, failure_message(hang, suspect ? &r : nullptr)};
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
  if (reading_) {  // a reading for the silence's report is under way: after it
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
  watching_ = true;
  tick();
}

void HangWatch::stop() {
  watching_ = false;
  ++generation_;
  timer_.cancel();
  cancel_reading();  // a failure or a signal ends the job now, whatever a reader does
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
    } else if (hang && !reading_) {
      read_stacks(std::move(*hang), true, [this, probes](Hang read) { report(std::move(read), probes); });
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

void HangWatch::read_stacks(Hang hang, bool current, std::function<void(Hang)> done) {
  reading_ = true;
  if (reader_.joinable()) reader_.join();
  cancel_ = std::make_shared<EventFd>();
  std::map<pid_t, std::string> hook_files;
  for (const auto& p : probes_()) {
    hook_files[p.pid] = p.stacks_file;
    for (auto& r : hang.ranks) {
      if (r.pid == p.pid) r.traceback = p.traceback;
    }
  }
  const ReadLimits limits{kStackTimeout, cancel_->fd, settings_.cgroup_fd, settings_.cgroup_procs_fd};
  reader_ = std::jthread([this, hang = std::move(hang), done = std::move(done), alive = alive_, current,
                          generation = generation_, tools = tools_, limits, hook_files, cancel = cancel_]() mutable {
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
      r.stack = std::move(read.stack);
      r.native = std::move(read.native);
      r.stack_error = std::move(read.error);
      r.stack_by = std::move(read.by);
      r.read_pid = read.read_pid;
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

void HangWatch::report(Hang hang, const std::vector<Probe>& probes) {
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
