#include "launcher/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "config/flags.h"
#include "launcher/console.h"
#include "launcher/failure_summary.h"
#include "watch/file_timers.h"
#include "watch/hang_watch.h"
#include "launcher/line_groups.h"
#include "watch/live_figures.h"
#include "watch/traceback.h"
#include "launcher/line_prefixer.h"
#include "node/bounded_run.h"
#include "node/memcg.h"
#include "node/proc_stat.h"
#include "base/posix.h"
#include "node/spawn.h"
#include "launcher/worker_env.h"
#include "store/server.h"

extern char** environ;

namespace dtl::launcher {
namespace asio = boost::asio;

namespace {

/// --dedup_lines: how long a line waits for the same line from the other ranks.
constexpr auto kLineWindow = std::chrono::milliseconds(500);

/// How long output may still arrive after every process is gone (a pipe held open by a process
/// that left the worker's process group and dtlaunch's reach).
constexpr auto kDrainTimeout = std::chrono::seconds(5);

bool has(config::Streams s, int which) { return (static_cast<int>(s) & which) != 0; }

/// Processes dtlaunch is the parent of now: its workers, and orphans it adopted as subreaper.
std::vector<pid_t> child_processes() {
  std::vector<pid_t> pids;
  std::ifstream in("/proc/self/task/" + std::to_string(getpid()) + "/children");
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

watch::WatchSettings watch_settings(const LaunchPlan& plan, const RunLogDir& logs, node::OrphanGuard& guard) {
  watch::WatchSettings s{plan.hang_timeout_s, plan.on_hang_fail, plan.python_workers, plan.exec_path, logs.path()};
  if (const node::JobCgroup* cgroup = guard.cgroup()) {
    s.cgroup_fd = cgroup->dir_fd();
    s.cgroup_procs_fd = cgroup->procs_fd();
  }
  return s;
}

int open_log(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path.string());
  return fd;
}

}  // namespace

std::vector<StopStep> stop_sequence(int signal, double grace_s) {
  return {{signal, std::chrono::milliseconds(std::llround(grace_s * 1000))}, {SIGKILL, std::chrono::milliseconds(0)}};
}

struct WorkerGroup::Impl {
  struct Worker;
  /// One of a worker's output streams on its way to the console and/or a file.
  struct Stream {
    Stream(asio::io_context& io, Worker& worker) : pipe(io), worker(worker) {}
    Stream(const Stream&) = delete;
    ~Stream() {
      if (file_fd >= 0) ::close(file_fd);  // a worker that never started: close_stream never ran
    }
    asio::posix::stream_descriptor pipe;
    Worker& worker;
    std::unique_ptr<LinePrefixer> prefixer;  ///< set when the stream goes to the console
    int console_fd = -1;
    int file_fd = -1;
    int filtered_fd = -1;  ///< the attempt's filtered_std*.log, for tee'd lines that match a filter
    const std::vector<std::string>* filters = nullptr;
    size_t prefix_size = 0;
    bool open = false;
    bool paused = false;  ///< not read until the console drains (the worker waits on its own writes)
    int pending = 0;      ///< handlers queued that name this stream: a read, a wait for the console
    std::array<char, 1 << 16> buf;
  };

  struct Worker {
    Worker(asio::io_context& io) : out(io, *this), err(io, *this) {}
    /// No handler names it any more: it may be freed.
    bool idle() const { return out.pending == 0 && err.pending == 0; }
    int local_rank = 0;
    int rank = 0;
    pid_t pid = -1;
    bool running = false;
    bool signalled = false;  ///< dtlaunch asked it to stop: its exit is not a failure
    watch::HangClock::time_point last_output;  ///< or its start: what the hang watch counts silence from
    std::string error_file;
    std::string stacks_file;  ///< DTLAUNCH_STACKS_FILE, where the faulthandler hook writes
    watch::TracebackCatcher traceback;  ///< whether its last word was a traceback
    node::MemoryCgroup memcg;           ///< its memory cgroup, for the kernel's word on a SIGKILL
    std::optional<uint64_t> oom_kills;  ///< that cgroup's OOM kills when it started
    Stream out, err;
  };

  enum class Phase { idle, running, stopping, finishing };

  Impl(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs, node::OrphanGuard& guard,
       Callbacks callbacks)
      : io(io), console(console), plan(plan), logs(logs), guard(guard), callbacks(std::move(callbacks)),
        stop_timer(io), drain_timer(io), reap_timer(io),
        watcher(
            io, watch_settings(plan, logs, guard),
            [this](const std::string& text) { this->console.write(2, text); }, [this] { return probes(); },
            [this](const watch::HangWatch::Probe& p, const std::string& why) { fail_hung(p, why); }),
        live(io, {posix::host_name(), plan.worker_gpus, plan.gpu_source == "fake"}, watcher, [this] { return probes(); }),
        lines_timer(io) {
    if (plan.dedup_lines) {
      for (int fd : {1, 2}) grouped[fd] = std::make_unique<LineGroups>(kLineWindow);
    }
  }
  ~Impl() {
    console.forget(io);
    close_filtered();
  }

  asio::io_context& io;
  Console& console;
  const LaunchPlan& plan;
  RunLogDir& logs;
  node::OrphanGuard& guard;
  Callbacks callbacks;
  asio::steady_timer stop_timer;
  asio::steady_timer drain_timer;
  asio::steady_timer reap_timer;  ///< kReapLimit after a SIGKILL
  watch::HangWatch watcher;
  watch::LiveFigures live;  ///< `dtlaunch top` and the metrics
  std::unique_ptr<LineGroups> grouped[3];  ///< --dedup_lines: stdout's and stderr's, by fd
  asio::steady_timer lines_timer;          ///< when the next held line falls due
  std::unique_ptr<watch::FileTimerServer> timers;  ///< with TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::map<pid_t, std::string> expired_timers;  ///< a worker signalled for its timers: what to report
  std::map<std::string, uint64_t> oom_kills_seen;  ///< by memory cgroup: the OOM kills accounted to ranks

  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::unique_ptr<Worker>> retired;  ///< earlier attempts' with handlers still queued
  std::vector<Failure> failures;
  Phase phase = Phase::idle;
  unsigned stop_generation = 0;  ///< a later stop sequence supersedes an earlier one's pending step
  bool start_failed = false;
  bool drain_armed = false;
  bool reap_armed = false;
  std::set<pid_t> unreaped;  ///< alive kReapLimit after SIGKILL: reported, no longer waited for
  bool wrote_files = false;
  std::string scratch;
  const std::string host = posix::host_name();
  int filtered_fds[3] = {-1, -1, -1};  ///< this attempt's filtered_stdout.log and filtered_stderr.log
  const std::vector<std::string> withheld = config::secret_variables();

  // ---- starting ----

  void start(const GroupEnv& given) {
    GroupEnv group = given;
    phase = Phase::running;
    drain_armed = false;
    reap_armed = false;
    start_failed = false;
    failures.clear();
    // An earlier attempt's workers are freed once no handler names them: a restart costs the same
    // memory whichever it is (each worker holds two 64 KiB buffers).
    std::erase_if(retired, [](const auto& w) { return w->idle(); });
    for (auto& w : workers) {
      if (!w->idle()) retired.push_back(std::move(w));
    }
    workers.clear();
    close_filtered();
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    try {
      // the workers' stdin: never dtlaunch's own (a terminal, or the fan-out's pipe)
      if (devnull < 0) throw std::system_error(errno, std::generic_category(), "cannot open /dev/null");
      const auto attempt_dir = logs.rank_dir(group.restart_count, 0).parent_path();
      if (!plan.stdout_filters.empty()) filtered_fds[1] = open_log(attempt_dir / "filtered_stdout.log");
      if (!plan.stderr_filters.empty()) filtered_fds[2] = open_log(attempt_dir / "filtered_stderr.log");
      serve_timers(group);
      for (int lr = 0; lr < plan.nproc; ++lr) workers.push_back(start_worker(group, lr, devnull));
    } catch (const std::exception& e) {
      spdlog::error("cannot start worker {}: {}", workers.size(), e.what());
      start_failed = true;
      run_stop({{SIGKILL, std::chrono::milliseconds(0)}});
    }
    if (devnull >= 0) ::close(devnull);
    if (phase == Phase::running) watcher.start(group.restart_count);
    live.attempt({group.run_id, group.world_size, group.group_world_size, group.restart_count, group.max_restarts});
    maybe_finish();
  }

  /// torchrun's FileTimerServer (watch/file_timers.h), from the first attempt on.
  void serve_timers(GroupEnv& group) {
    const char* enabled = std::getenv("TORCHELASTIC_ENABLE_FILE_TIMER");
    if (!enabled || std::string(enabled) != "1") return;
    const char* given = std::getenv("TORCHELASTIC_TIMER_FILE");
    if (!timers) {
      const std::string path = given ? given : (logs.path() / "watchdog_timer").string();
      timers = std::make_unique<watch::FileTimerServer>(
          io, path, [this](pid_t pid, int sig, const std::vector<std::string>& scopes) { return fire(pid, sig, scopes); });
      spdlog::info("serving the workers' expiration timers at {}", path);
    }
    if (!given) group.variables.emplace_back("TORCHELASTIC_TIMER_FILE", timers->path());
  }

  /// An expired timer of `pid`: signalled when it is a running worker, or a process in one's session.
  bool fire(pid_t pid, int sig, const std::vector<std::string>& scopes) {
    const auto stat = node::read_proc_stat(pid);
    for (auto& w : workers) {
      if (!w->running || (w->pid != pid && !(stat && stat->session == w->pid))) continue;
      std::string names;
      for (const auto& s : scopes) names += (names.empty() ? "" : ", ") + s;
      spdlog::warn("expiration timer {} of rank {} (pid {}) expired: sending {}", names, w->rank, pid,
                   posix::signal_name(sig));
      if (pid == w->pid) expired_timers[pid] = "expired timer " + names + " (FileTimerClient): " + posix::signal_name(sig) + " sent";
      ::kill(pid, sig);
      return true;
    }
    return false;
  }

  std::vector<watch::HangWatch::Probe> probes() const {
    std::vector<watch::HangWatch::Probe> out;
    for (const auto& w : workers) {
      if (w->running) {
        out.push_back({w->rank, w->local_rank, w->pid, w->last_output, w->error_file, w->stacks_file,
                       w->traceback.last()});
      }
    }
    return out;
  }

  /// A SIGKILL that dtlaunch did not send, by the kernel's word: its OOM killer (the memory
  /// cgroup's count went up, or the kernel log names the pid), or someone outside.
  std::string why_killed(const Worker& w, long peak_kb) {
    const auto count = node::oom_kills(w.memcg);
    const auto logged = node::kernel_log_says_oom_killed(w.pid);
    bool oom = logged && *logged;
    if (count && w.oom_kills) {
      uint64_t& seen = oom_kills_seen.try_emplace(w.memcg.dir, *w.oom_kills).first->second;
      if (*count > seen) {  // one kill of the cgroup's count is this rank's
        ++seen;
        oom = true;
      }
    }
    const std::string peak = ", peak RSS " + node::format_bytes(static_cast<uint64_t>(peak_kb) * 1024);
    if (oom) {
      const auto limit = node::memory_limit(w.memcg);
      return ": killed by the kernel's out-of-memory killer (" +
             (limit.where.empty() ? "the machine's " + node::format_bytes(limit.bytes) + " of memory ran out"
                                  : "its memory cgroup's limit of " + node::format_bytes(limit.bytes) + " was reached, " +
                                        limit.where) +
             peak + ")";
    }
    if (count || logged) {
      return ": the SIGKILL came from outside dtlaunch (the kernel's out-of-memory killer killed nothing in its "
             "memory cgroup)";
    }
    return "";
  }

  /// The hang watch's verdict with --on_hang=fail: the suspect's failure stops the group, as a
  /// worker's own failure does.
  void fail_hung(const watch::HangWatch::Probe& p, const std::string& why) {
    if (phase != Phase::running) return;
    Failure f = describe_failure(p.local_rank, p.rank, p.pid, 1 << 8, std::chrono::system_clock::now(), p.error_file);
    if (f.error_file == "<N/A>") f.message = why;
    failures.push_back(f);
    spdlog::warn("the workers hung: stopping them as a failure of rank {} (--on_hang=fail)", f.rank);
    run_stop(stop_sequence(SIGTERM, plan.shutdown_timeout_s));
    if (callbacks.on_failure) callbacks.on_failure(failures);
  }

  std::unique_ptr<Worker> start_worker(const GroupEnv& group, int lr, int stdin_fd) {
    auto w = std::make_unique<Worker>(io);
    w->local_rank = lr;
    w->rank = group.base_rank + lr;
    auto dir = logs.rank_dir(group.restart_count, lr);
    w->error_file = (dir / "error.json").string();

    // The ends the worker writes to: dtlaunch's copies are closed once it started, or when it cannot.
    struct ChildEnds {
      int fds[3];
      ~ChildEnds() {
        for (int which : {1, 2}) {
          if (fds[which] >= 0) ::close(fds[which]);
        }
      }
    } ends{{stdin_fd, -1, -1}};
    int (&child_fds)[3] = ends.fds;
    for (int which : {1, 2}) child_fds[which] = connect_stream(*w, group, which, dir);

    WorkerSlot slot{lr, w->error_file, plan.cuda_visible_devices[lr]};
    w->stacks_file = (dir / "stacks.txt").string();
    node::SpawnSpec spec{plan.exec_path, substitute_local_rank(plan.argv, lr),
                   merge_environ(environ, with_stacks_fallback(worker_env(group, slot, process_env()), *w), withheld),
                   child_fds[0], child_fds[1], child_fds[2]};
    if (!plan.cpus.empty()) spec.cpus = plan.cpus[lr];
    if (const node::JobCgroup* cgroup = guard.cgroup()) {
      spec.cgroup_fd = cgroup->dir_fd();
      spec.cgroup_procs_fd = cgroup->procs_fd();
    }
    w->pid = node::spawn_worker(spec);
    w->running = true;
    w->memcg = node::memory_cgroup(w->pid);
    w->oom_kills = node::oom_kills(w->memcg);
    if (w->oom_kills) oom_kills_seen.try_emplace(w->memcg.dir, *w->oom_kills);
    w->last_output = watch::HangClock::now();
    guard.watch(w->pid);
    for (Stream* s : {&w->out, &w->err}) {
      if (s->open) read_more(*s);
    }
    return w;
  }

  /// A worker's variables with the hang watch's, where ptrace is not allowed (its PYTHONPATH first).
  EnvPairs with_stacks_fallback(EnvPairs env, const Worker& w) {
    const EnvLookup inherited = process_env();
    const EnvLookup given = [&](const std::string& name) -> std::optional<std::string> {
      for (const auto& [k, v] : env) {
        if (k == name) return v;
      }
      return inherited(name);
    };
    auto extra = watcher.worker_variables(w.stacks_file, given);
    if (extra.empty()) return env;
    std::erase_if(env, [&](const auto& kv) {
      return std::any_of(extra.begin(), extra.end(), [&](const auto& x) { return x.first == kv.first; });
    });
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  /// Where worker `w`'s stream `which` (1: stdout, 2: stderr) goes: to the console through a pipe,
  /// to its file, or both. Returns the fd the worker writes to, which dtlaunch closes once it started.
  int connect_stream(Worker& w, const GroupEnv& group, int which, const std::filesystem::path& dir) {
    const int lr = w.local_rank;
    Stream& s = which == 1 ? w.out : w.err;
    const bool on_console = !plan.console_filter || plan.console_filter->count(lr);
    bool to_file = has(plan.redirects.for_rank(lr), which) || has(plan.tee.for_rank(lr), which);
    bool to_console = on_console && (!has(plan.redirects.for_rank(lr), which) || has(plan.tee.for_rank(lr), which));
    if (!to_console) to_file = true;  // hidden from the console: kept in its file, never dropped
    int file_fd = to_file ? open_log(dir / (which == 1 ? "stdout.log" : "stderr.log")) : -1;
    wrote_files |= to_file;
    if (!to_console) return file_fd;  // the worker writes its file itself
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      const int e = errno;
      if (file_fd >= 0) ::close(file_fd);
      throw std::system_error(e, std::generic_category(), "pipe");
    }
    s.pipe.assign(p[0]);
    s.open = true;
    s.file_fd = file_fd;
    s.console_fd = which;
    const std::string prefix = expand_prefix(plan.prefix_template, group.role, lr, w.rank, host);
    s.prefixer = std::make_unique<LinePrefixer>(prefix);
    s.prefix_size = prefix.size();
    if (grouped[which]) grouped[which]->expect(w.rank);
    if (has(plan.tee.for_rank(lr), which) && filtered_fds[which] >= 0) {
      s.filtered_fd = filtered_fds[which];
      s.filters = which == 1 ? &plan.stdout_filters : &plan.stderr_filters;
    }
    return p[1];
  }

  // ---- output ----

  void read_more(Stream& s) {
    ++s.pending;
    s.pipe.async_read_some(asio::buffer(s.buf), [this, &s](const boost::system::error_code& ec, size_t n) {
      --s.pending;
      if (n > 0) deliver(s, n);
      if (ec) {
        if (s.open) close_stream(s);
        maybe_finish();
        return;
      }
      // Backpressure from a slow console reaches running workers only: an exited one's pipe holds
      // at most a pipe buffer more, and is read to its end so the group can finish.
      if (s.worker.running && console.backed_up()) {
        s.paused = true;
        ++s.pending;
        console.when_drained(io, [this, &s] {
          --s.pending;
          resume(s);
        });
        return;
      }
      read_more(s);
    });
  }

  void resume(Stream& s) {
    if (!s.paused) return;
    s.paused = false;
    read_more(s);
  }

  void deliver(Stream& s, size_t n) {
    s.worker.last_output = watch::HangClock::now();
    const std::string_view chunk(s.buf.data(), n);
    if (&s == &s.worker.err) {
      s.worker.traceback.feed(chunk);
    } else {
      s.worker.traceback.other_output(chunk);
    }
    if (s.file_fd >= 0) posix::write_all(s.file_fd, std::string_view(s.buf.data(), n));
    if (s.prefixer) {
      scratch.clear();
      s.prefixer->feed(std::string_view(s.buf.data(), n), scratch);
      to_console(s, false);
      duplicate_filtered(s);
    }
  }

  /// The prefixed lines in `scratch` to the console; with --dedup_lines through the stream's line
  /// groups, which lead them by their ranks instead. `ended`: the stream's last lines.
  void to_console(const Stream& s, bool ended) {
    LineGroups* groups = grouped[s.console_fd].get();
    if (!groups) return console.write(s.console_fd, scratch);
    std::string out;
    const auto now = LineGroups::Clock::now();
    for (size_t start = 0; start < scratch.size();) {
      size_t end = scratch.find_first_of("\r\n", start);
      end = end == std::string::npos ? scratch.size() : end + 1;
      if (end < scratch.size() && scratch[end - 1] == '\r' && scratch[end] == '\n') ++end;
      const std::string_view line(scratch.data() + start, end - start);
      groups->add(s.worker.rank, line.substr(std::min(s.prefix_size, line.size())), now, out);
      start = end;
    }
    if (ended) groups->gone(s.worker.rank, out);
    if (!out.empty()) console.write(s.console_fd, out);
    arm_lines();
  }

  /// Wakes when the earliest held line falls due.
  void arm_lines() {
    std::optional<LineGroups::Clock::time_point> next;
    for (int fd : {1, 2}) {
      std::string out;
      const auto due = grouped[fd]->due(LineGroups::Clock::now(), out);
      if (!out.empty()) console.write(fd, out);
      if (due && (!next || *due < *next)) next = due;
    }
    if (!next) return;
    lines_timer.expires_at(*next);
    lines_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) arm_lines();
    });
  }

  /// torchrun's duplicate filters: each prefixed line whose text holds a filter word goes to the
  /// attempt's filtered file too.
  void duplicate_filtered(const Stream& s) {
    if (s.filtered_fd < 0) return;
    for (size_t start = 0; start < scratch.size();) {
      size_t end = scratch.find('\n', start);
      end = end == std::string::npos ? scratch.size() : end + 1;
      std::string_view line(scratch.data() + start, end - start);
      std::string_view text = line.substr(std::min(s.prefix_size, line.size()));
      for (const auto& word : *s.filters) {
        if (text.find(word) != std::string_view::npos) {
          posix::write_all(s.filtered_fd, line);
          break;
        }
      }
      start = end;
    }
  }

  void close_filtered() {
    for (int& fd : filtered_fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

  void close_stream(Stream& s) {
    if (s.prefixer) {
      scratch.clear();
      s.prefixer->finish(scratch);
      to_console(s, true);
      duplicate_filtered(s);
    }
    boost::system::error_code ignored;
    s.pipe.close(ignored);
    if (s.file_fd >= 0) ::close(s.file_fd);
    s.file_fd = -1;
    s.open = false;
  }

  // ---- exits ----

  void reap() {
    int status = 0;
    pid_t pid;
    rusage usage{};
    while ((pid = wait4(-1, &status, WNOHANG, &usage)) > 0) {
      auto now = std::chrono::system_clock::now();
      if (pid == guard.pid()) {
        spdlog::warn("the orphan guard (pid {}) exited; a SIGKILLed dtlaunch may now leave workers' children", pid);
        continue;
      }
      if (std::none_of(workers.begin(), workers.end(), [pid](const auto& w) { return w->pid == pid; })) {
        node::handed_exit(pid, status);  // a stack reader's, or an orphan adopted as subreaper
        continue;
      }
      for (auto& w : workers) {
        if (w->pid != pid || !w->running) continue;
        w->running = false;
        for (Stream* s : {&w->out, &w->err}) resume(*s);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !w->signalled && phase == Phase::running) {
          failures.push_back(describe_failure(w->local_rank, w->rank, pid, status, now, w->error_file));
          failures.back().peak_rss_kb = usage.ru_maxrss;
          if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && failures.back().error_file == "<N/A>") {
            failures.back().message += why_killed(*w, usage.ru_maxrss);
          }
          if (auto t = expired_timers.find(pid); t != expired_timers.end() && failures.back().error_file == "<N/A>") {
            failures.back().message = t->second;
          }
        }
        expired_timers.erase(pid);
      }
    }
    if (phase == Phase::running && !failures.empty()) {
      const auto& f = failures.front();
      const bool oom = f.message.find("out-of-memory killer (") != std::string::npos;
      spdlog::warn("worker rank {} (local_rank {}, pid {}) failed with {}{}; stopping the other workers", f.rank,
                   f.local_rank, f.pid,
                   f.exitcode < 0 ? posix::signal_name(-f.exitcode) : "exit code " + std::to_string(f.exitcode),
                   oom ? ", killed by the kernel's out-of-memory killer" : "");
      run_stop(stop_sequence(SIGTERM, plan.shutdown_timeout_s));
      if (callbacks.on_failure) callbacks.on_failure(failures);
    }
    maybe_finish();
  }

  void signal_workers(int sig) {
    for (auto& w : workers) {
      if (!w->running) continue;
      node::signal_worker(w->pid, sig);
      w->signalled = true;
    }
  }

  /// The one place a stop sequence runs: each step signals the workers still running, and the next
  /// follows after the step's wait unless the group finished first or another sequence took over.
  void run_stop(std::vector<StopStep> steps, size_t step = 0) {
    if (phase == Phase::idle || phase == Phase::finishing) return;
    if (step == 0) ++stop_generation;
    phase = Phase::stopping;
    watcher.stop();
    signal_workers(steps[step].signal);
    if (steps[step].signal == SIGKILL) arm_reap_limit();
    if (step + 1 == steps.size()) return;
    stop_timer.expires_after(steps[step].wait);
    stop_timer.async_wait([this, steps, step, generation = stop_generation](const boost::system::error_code& ec) {
      if (ec || phase != Phase::stopping || generation != stop_generation) return;
      spdlog::warn("workers still running {}s after the stop signal: sending {}",
                   std::chrono::duration<double>(steps[step].wait).count(), posix::signal_name(steps[step + 1].signal));
      run_stop(steps, step + 1);
    });
  }

  /// The attempt ends once every worker exited, every process they left behind is gone and their
  /// output is drained.
  void maybe_finish() {
    if (phase == Phase::idle || phase == Phase::finishing) return;
    for (auto& w : workers) {
      if (w->running) return;
    }
    if (kill_stragglers()) return;  // their SIGCHLD brings us back here
    if (phase == Phase::running) phase = Phase::stopping;
    bool open = false;
    for (auto& w : workers) open |= w->out.open || w->err.open;
    if (open) return arm_drain();
    phase = Phase::finishing;
    watcher.stop();
    stop_timer.cancel();
    drain_timer.cancel();
    reap_timer.cancel();
    for (auto& w : workers) guard.forget(w->pid);
    phase = Phase::idle;
    callbacks.on_finished(Result{failures, start_failed, {unreaped.begin(), unreaped.end()}});
  }

  /// Stops reading what is still open of a worker's output (it holds the other ends).
  void close_streams(Worker& w) {
    for (Stream* s : {&w.out, &w.err}) {
      if (s->open) close_stream(*s);
    }
  }

  /// Output may trail the exits by a moment; after kDrainTimeout what is still open is closed.
  void arm_drain() {
    if (drain_armed) return;
    drain_armed = true;
    drain_timer.expires_after(kDrainTimeout);
    drain_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || phase != Phase::stopping) return;
      spdlog::warn("worker output still open {}s after the workers exited; closing it", kDrainTimeout.count());
      for (auto& w : workers) close_streams(*w);
      maybe_finish();
    });
  }

  /// SIGKILLs what is left in the workers' process groups and every adopted orphan (whatever group
  /// or session it moved to, it comes to dtlaunch, the subreaper); true while any is still alive
  /// and not yet given up on. Not cgroup.kill: on Linux 6.18 a process cloned into the cgroup after
  /// one is killed at birth.
  bool kill_stragglers() {
    // The workers are reaped: their pids may be anyone's now, their groups only theirs while they last.
    for (auto& w : workers) ::kill(-w->pid, SIGKILL);
    bool any = false;
    for (pid_t pid : child_processes()) {
      if (pid == guard.pid() || unreaped.contains(pid)) continue;
      ::kill(pid, SIGKILL);
      any = true;
    }
    if (any) arm_reap_limit();
    return any;
  }

  /// Whatever a SIGKILL has not ended kReapLimit later is in uninterruptible sleep (a hung NFS or
  /// FUSE request, a GPU driver call): no signal ends it, so dtlaunch names it and stops waiting.
  void arm_reap_limit() {
    if (reap_armed) return;
    reap_armed = true;
    reap_timer.expires_after(kReapLimit);
    reap_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || phase != Phase::stopping) return;
      for (auto& w : workers) {
        if (!w->running) continue;
        give_up_on(w->pid, fmt::format("worker rank {} (local_rank {}, pid {})", w->rank, w->local_rank, w->pid));
        w->running = false;
        close_streams(*w);
      }
      for (pid_t pid : child_processes()) {
        if (pid != guard.pid() && !unreaped.contains(pid)) give_up_on(pid, fmt::format("pid {}, left by a worker,", pid));
      }
      maybe_finish();
    });
  }

  void give_up_on(pid_t pid, const std::string& who) {
    unreaped.insert(pid);
    const auto stat = node::read_proc_stat(pid);
    std::string wchan = posix::read_small_file("/proc/" + std::to_string(pid) + "/wchan", 128);
    const std::string where = wchan.empty() || wchan == "0" ? "" : " in the kernel's " + wchan;
    const std::string state = !stat                ? "it is gone from /proc but not reaped"
                              : stat->state == 'D' ? "it is in uninterruptible sleep (D)" + where
                                                   : std::string("its state is ") + stat->state + where;
    spdlog::error("{} could not be reaped {}s after SIGKILL: {}; it keeps what it holds (GPU memory, files, "
                  "ports) until the kernel lets it go",
                  who, kReapLimit.count(), state);
  }
};

WorkerGroup::WorkerGroup(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
                         node::OrphanGuard& guard, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(io, console, plan, logs, guard, std::move(callbacks))) {}
WorkerGroup::~WorkerGroup() = default;
void WorkerGroup::start(const GroupEnv& group) { impl_->start(group); }
void WorkerGroup::stop(int sig) { impl_->run_stop(stop_sequence(sig, impl_->plan.shutdown_timeout_s)); }
void WorkerGroup::kill() { impl_->run_stop({{SIGKILL, std::chrono::milliseconds(0)}}); }
void WorkerGroup::reap() { impl_->reap(); }
void WorkerGroup::pass_on(int sig) { impl_->signal_workers(sig); }
bool WorkerGroup::active() const { return impl_->phase != Impl::Phase::idle; }
watch::HangWatch& WorkerGroup::hangs() { return impl_->watcher; }
watch::LiveFigures& WorkerGroup::live() { return impl_->live; }

void WorkerGroup::watch_store(store::Server& store) {
  store.watch("exception_dump", [this](const std::string& value) {
    // After the store has answered the request that set it: the report reads stacks and may stop
    // the group, neither of which belongs inside the store's handler.
    asio::post(impl_->io, [this, cause = watch::nccl_timeout_cause(value)] { impl_->watcher.signal(cause); });
  });
}

bool WorkerGroup::wrote_log_files() const { return impl_->wrote_files || impl_->watcher.wrote_report(); }

}  // namespace dtl::launcher
