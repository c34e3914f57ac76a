#include "watch/recorder_reader.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>

#include "base/posix.h"
#include "base/text.h"
#include "node/bounded_run.h"
#include "node/proc_stat.h"
#include "node/process.h"

namespace dtl::watch {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(10);
/// A hook busy with another request, or reopening its FIFO, is asked again this long.
constexpr auto kBusyFor = std::chrono::milliseconds(500);
constexpr size_t kAnalyzerOutputCap = 8 << 20;

/// The file's change time and size, or nothing when it is not there.
std::optional<std::pair<long long, off_t>> file_state(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair{static_cast<long long>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, st.st_size};
}

bool is_fifo(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

/// Writes `text` to a FIFO's reader, if one waits on it now and its FIFO has room: one write that
/// never blocks (a reader that stopped reading leaves its FIFO full).
bool send(const std::string& fifo, const std::string& text) {
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;  // ENXIO: nobody reads it now
  const ssize_t n = posix::retry_eintr([&] { return ::write(fd, text.data(), text.size()); });
  ::close(fd);
  return n == static_cast<ssize_t>(text.size());
}

/// A request's own id: a hook's answer to an earlier request, come late, is not taken for this one.
std::string request_id() {
  static std::atomic<unsigned long> count{0};
  return std::to_string(::getpid()) + "-" + std::to_string(++count);
}

/// One rank being asked.
struct Asking {
  RecordAnswer answer;
  bool done = false;
  bool pipe = false;  ///< through NCCL's pipe, not the hook
  pid_t pid = 0;
  std::string trigger, request;  ///< the hook's FIFO, and its request until taken
  std::string id;                ///< the request's id, which the hook's answer repeats
  std::string written, keep_as;  ///< where the hook writes the record, and its name once answered
  Clock::time_point busy_until;  ///< the hook is asked again until then
  Clock::time_point deadline;
  std::string status;                                 ///< the hook's answer file
  std::string dump, copy_to;                          ///< NCCL's dump, and where it goes
  std::optional<std::pair<long long, off_t>> before;  ///< the dump as it was before asking
  std::optional<std::pair<long long, off_t>> seen;    ///< the dump at the last look
};

/// Why a rank's hook does not take a request.
std::string no_hook(pid_t pid) {
  if (const char state = node::proc_usage(pid).state; state == 'T' || state == 't') {
    return "it is stopped (SIGSTOP, or a debugger holds it): its hook cannot answer";
  }
  if (!node::rank_process(pid).kind.python) return std::string(kNotAsked);
  return "dtlaunch's hook does not answer (not loaded: python -I, -E or -S, or a PYTHONPATH of its own?)";
}

/// Looks again at a rank being asked: `done` once it answered, or will not.
void look(Asking& a, Clock::time_point now) {
  if (!a.request.empty()) {  // not taken yet
    if (send(a.trigger, a.request)) {
      a.request.clear();
    } else if (now >= a.busy_until) {
      a.answer.why = no_hook(a.pid);
      a.done = true;
    }
    return;
  }
  if (a.pipe) {
    // torch writes its dump in place: done once it changed and then held still for one look
    const auto state = file_state(a.dump);
    if (state && state != a.before && state == a.seen && state->second > 0) {
      std::error_code ec;
      std::filesystem::copy_file(a.dump, a.copy_to, std::filesystem::copy_options::overwrite_existing, ec);
      a.answer.ok = !ec;
      if (ec) a.answer.why = "cannot copy " + a.dump + ": " + ec.message();
      a.done = true;
    }
    a.seen = state;
    return;
  }
  if (!file_state(a.status)) return;
  std::string answer = posix::read_small_file(a.status, 1 << 16);
  answer = answer.substr(0, answer.find('\n'));
  const auto fields = text::split(answer, '\t');
  if (fields.empty() || fields[0] != a.id) return;  // an answer to an earlier request
  if (fields.size() >= 3 && fields[1] == "ok") {
    a.answer.ok = true;
    a.answer.python = fields[2];
    std::error_code ec;
    if (!a.keep_as.empty()) std::filesystem::rename(a.written, a.keep_as, ec);
    if (ec) {
      a.answer.ok = false;
      a.answer.why = "cannot rename " + a.written + ": " + ec.message();
    }
  } else {
    a.answer.why = fields.size() >= 3 ? fields[2] : "its hook's answer is not one";
  }
  a.done = true;
}

/// Asks every rank at once and waits for them all, within `limits`.
std::vector<RecordAnswer> ask(std::vector<Asking> asking, const AskLimits& limits) {
  const auto start = Clock::now();
  for (auto& a : asking) {
    a.busy_until = start + kBusyFor;
    a.deadline = start + (a.pipe ? limits.pipe_timeout : limits.timeout);
  }
  for (;;) {
    const auto now = Clock::now();
    bool pending = false;
    for (auto& a : asking) {
      if (!a.done) look(a, now);
      if (!a.done && now >= a.deadline) {
        a.answer.why = (a.pipe ? "NCCL's pipe" : "dtlaunch's hook") + std::string(" did not answer within ") +
                       std::to_string((a.pipe ? limits.pipe_timeout : limits.timeout).count()) + " ms";
        a.done = true;
      }
      pending |= !a.done;
    }
    if (!pending) break;
    pollfd cancel{limits.cancel_fd, POLLIN, 0};
    if (posix::retry_eintr([&] { return ::poll(&cancel, limits.cancel_fd >= 0 ? 1 : 0, kPoll.count()); }) > 0) {
      for (auto& a : asking) {
        if (!a.done) a.answer.why = "not asked: the job ended";
        a.done = true;
      }
      break;
    }
  }
  std::vector<RecordAnswer> out;
  for (auto& a : asking) out.push_back(std::move(a.answer));
  return out;
}

/// A request to a rank's hook: what to do, where to write it, where to answer, and the request's
/// id. A record is written under a name of the request's own, and takes `out`'s once answered: a
/// hook that answers late cannot leave its record for a later reading.
Asking hook_request(const RecorderRank& r, const std::string& kind, const std::string& out, bool rename) {
  Asking a;
  a.answer.rank = r.rank;
  a.answer.by = "dtlaunch's hook";
  a.pid = r.pid;
  a.status = r.files.status;
  a.trigger = r.files.trigger;
  a.id = request_id();
  a.written = out;
  if (rename) {
    const auto path = std::filesystem::path(out);
    a.written = (path.parent_path() / ("." + path.filename().string() + "." + a.id)).string();
    a.keep_as = out;
  }
  a.request = kind + "\n" + a.written + "\n" + r.files.status + "\n" + a.id + "\n";
  return a;
}

}  // namespace

std::vector<RecordAnswer> collect_records(const std::vector<RecorderRank>& ranks, const RecorderPaths& paths,
                                          const AskLimits& limits) {
  // a reading's records only: none left from an earlier one, whose rank may not answer now
  std::error_code ec;
  std::filesystem::remove_all(paths.folder, ec);
  std::filesystem::create_directories(paths.folder, ec);
  std::vector<Asking> asking;
  for (const auto& r : ranks) {
    const std::string ours = paths.folder + "/" + std::string(kRecordPrefix) + std::to_string(r.rank);
    const std::string pipe = paths.nccl_pipe.empty() ? "" : paths.nccl_pipe + std::to_string(r.rank) + ".pipe";
    if (!pipe.empty() && is_fifo(pipe)) {
      Asking a;
      a.answer.rank = r.rank;
      a.answer.by = "NCCL's pipe";
      a.pid = r.pid;
      a.pipe = true;
      a.dump = paths.dump_prefix + std::to_string(r.rank);
      a.copy_to = ours;
      a.before = file_state(a.dump);
      a.seen = a.before;
      // any bytes make torch dump; a pipe no thread reads any more is not waited on
      a.done = !send(pipe, "1\n");
      if (a.done) a.answer.why = "NCCL's pipe " + pipe + " has no reader";
      asking.push_back(std::move(a));
    } else {
      asking.push_back(hook_request(r, "dump", ours, true));
    }
  }
  return ask(std::move(asking), limits);
}

std::map<int, std::string> collect_times(const std::vector<RecorderRank>& ranks, const AskLimits& limits) {
  std::vector<Asking> asking;
  for (const auto& r : ranks) asking.push_back(hook_request(r, "times", r.files.times, false));
  std::map<int, std::string> out;
  const auto answers = ask(std::move(asking), limits);
  for (size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].ok) out[answers[i].rank] = posix::read_small_file(ranks[i].files.times, 1 << 20);
  }
  return out;
}

std::string analyzer_python(const std::vector<RecordAnswer>& answers, const std::vector<RecorderRank>& ranks,
                            const std::string& fallback) {
  for (const auto& a : answers) {
    if (a.ok && !a.python.empty() && a.python.front() == '/') return a.python;
  }
  for (const auto& r : ranks) {
    const auto p = node::rank_process(r.pid);
    if (!p.kind.python) continue;
    const std::string cmdline = posix::read_small_file("/proc/" + std::to_string(p.pid) + "/cmdline", 1 << 16);
    const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
    if (!argv0.empty() && argv0.front() == '/') return argv0;
  }
  return fallback;
}

std::string run_analyzer_raw(const AnalyzerRun& run, std::string& why) {
  std::vector<std::string> argv{run.python, run.script};
  argv.insert(argv.end(), run.args.begin(), run.args.end());
  node::BoundedRun bounded{argv, run.timeout, kAnalyzerOutputCap, run.cancel_fd, run.cgroup_fd, run.cgroup_procs_fd};
  const auto out = node::run_bounded(bounded);
  if (out.end == node::BoundedOutput::End::exited && out.code == 0) return out.output;
  why = node::describe(out, "the analyzer (" + run.python + ")", run.timeout);
  return "";
}

CollectiveVerdict run_analyzer(const AnalyzerRun& run) {
  std::string why;
  const std::string output = run_analyzer_raw(run, why);
  if (output.empty()) {
    CollectiveVerdict v;
    v.error = why.empty() ? "the analyzer printed nothing" : why;
    return v;
  }
  return parse_verdict(output);
}

}  // namespace dtl::watch
