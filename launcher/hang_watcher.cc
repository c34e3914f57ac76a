#include "launcher/hang_watcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "base/posix.h"
#include "config/files.h"
#include "launcher/console.h"
#include "launcher/failure_summary.h"
#include "launcher/log_layout.h"
#include "launcher/plan.h"
#include "launcher/proc_stat.h"
#include "launcher/spawn.h"
#include "launcher/stacks_socket.h"

namespace dtl::launcher {
namespace asio = boost::asio;

namespace {

constexpr auto kTick = std::chrono::seconds(1);
constexpr auto kStackTimeout = std::chrono::seconds(10);
constexpr auto kOnDemandWindow = std::chrono::milliseconds(250);  ///< `dtlaunch stacks`'s CPU window
constexpr int kMaxDescendants = 256;

void add_descendants(pid_t pid, double tick_s, ProcUsage& usage, int& budget) {
  std::istringstream children(
      posix::read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t child; budget > 0 && children >> child; --budget) {
    const auto stat = read_proc_stat(child);
    if (!stat) continue;
    usage.cpu_s += static_cast<double>(stat->cpu_ticks.value_or(0)) * tick_s;
    add_descendants(child, tick_s, usage, budget);
  }
}

/// One rank's stacks by `reader` (py-spy or eu-stack), or why there are none.
struct Stacks {
  std::vector<std::string> stack, native;
  std::string error;
  std::string by;  ///< "faulthandler" where that read it
};

/// Whether `pid` has CUDA's driver loaded: its waits for the GPU show only in native frames.
bool uses_cuda(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/libcuda.so") != std::string::npos) return true;
  }
  return false;
}

std::optional<std::vector<std::string>> py_spy(const std::string& reader, pid_t pid, bool native) {
  std::vector<std::string> args{reader, "dump", "--pid", std::to_string(pid), "--json"};
  if (native) args.push_back("--native");
  std::string text;
  for (const auto& line : posix::run_program(args, kStackTimeout).lines) text += line + "\n";
  auto stack = parse_py_spy(text);
  if (stack && stack->empty()) return std::nullopt;
  return stack;
}

/// Where ptrace is not allowed, the workers' Python registers faulthandler on this signal (a
/// real-time one: SIGUSR1 and SIGUSR2 belong to Slurm's --signal and the training script).
int stacks_signal() { return SIGRTMIN + 6; }

/// On the workers' PYTHONPATH where ptrace is not allowed: faulthandler dumps every thread into
/// DTLAUNCH_STACKS_FILE on DTLAUNCH_STACKS_SIGNAL, then the next sitecustomize on the path runs as
/// if this one were not there.
constexpr const char* kSiteCustomize = R"(# Written by dtlaunch: stacks without ptrace (see dtlaunch's docs, hangs).
import os
import sys


def _dtlaunch_register():
    signum, path = os.environ.get("DTLAUNCH_STACKS_SIGNAL"), os.environ.get("DTLAUNCH_STACKS_FILE")
    if signum and path:
        import faulthandler
        faulthandler.register(int(signum), file=open(path, "a"), all_threads=True, chain=False)


def _dtlaunch_next_sitecustomize():
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


try:
    _dtlaunch_register()
except Exception as e:  # a worker runs without it rather than not at all
    print(f"dtlaunch: no stacks on a signal for this worker: {e}", file=sys.stderr)
_dtlaunch_next_sitecustomize()
)";

/// Why a stack reader, a child of dtlaunch as py-spy is, may not read a worker, another child with
/// dtlaunch named its ptracer; "" when it may (or when it cannot be told).
std::string ptrace_denied() {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return "";
  const pid_t parent = getpid();
  const pid_t target = fork();
  if (target == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    ssize_t ignored = write(ready[1], "r", 1);
    (void)ignored;
    for (;;) pause();
  }
  ::close(ready[1]);
  char byte = 0;
  const bool started = target > 0 && posix::retry_eintr([&] { return ::read(ready[0], &byte, 1); }) == 1;
  ::close(ready[0]);
  int err = 0;
  if (started) {
    static int probe = 42;  // at the same address in the target, a fork of this process
    const pid_t prober = fork();
    if (prober == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int seen = 0;
      iovec local{&seen, sizeof seen}, remote{&probe, sizeof probe};
      if (ptrace(PTRACE_SEIZE, target, nullptr, nullptr) != 0) _exit(errno & 0xff);
      if (process_vm_readv(target, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof seen)) _exit(errno & 0xff);
      _exit(0);
    }
    int status = 0;
    if (prober > 0 && posix::retry_eintr([&] { return ::waitpid(prober, &status, 0); }) == prober &&
        WIFEXITED(status)) {
      err = WEXITSTATUS(status);
    }
  }
  if (target > 0) {
    ::kill(target, SIGKILL);
    posix::retry_eintr([&] { return ::waitpid(target, nullptr, 0); });
  }
  return err ? std::string(strerrordesc_np(err)) : "";
}

/// The rank's stack from faulthandler: the signal to its main thread, then what it appended to its
/// file. nullopt when nothing came within a second.
std::optional<std::vector<std::string>> faulthandler_stack(pid_t pid, const std::string& file) {
  struct stat st {};
  const off_t before = ::stat(file.c_str(), &st) == 0 ? st.st_size : 0;
  if (::syscall(SYS_tgkill, pid, pid, stacks_signal()) != 0) return std::nullopt;
  off_t seen = before;
  // faulthandler writes in its signal handler, a few writes per frame: done once the size holds.
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const off_t now = ::stat(file.c_str(), &st) == 0 ? st.st_size : 0;
    if (now > before && now == seen) break;
    seen = now;
  }
  if (seen <= before) return std::nullopt;
  const std::string text = posix::read_small_file(file, 16 << 20);
  auto stack = parse_faulthandler(text.substr(std::min<size_t>(text.size(), static_cast<size_t>(before))));
  if (stack.empty()) return std::nullopt;
  return stack;
}

Stacks stacks_of(const std::string& reader, bool python, pid_t pid, const std::string& fallback_file) {
  if (!fallback_file.empty()) {  // no ptrace here: the rank's own faulthandler
    if (auto stack = faulthandler_stack(pid, fallback_file)) return {std::move(*stack), {}, "", "faulthandler"};
    return {{}, {}, "faulthandler did not answer the signal (a Python started with dtlaunch's PYTHONPATH?)", ""};
  }
  if (reader.empty()) {
    return {{},
            {},
            python ? "py-spy not found (pip install py-spy, or set DTLAUNCH_PY_SPY)"
                   : "eu-stack not found (apt install elfutils)",
            ""};
  }
  if (!python) {
    auto stack = parse_eu_stack(posix::run_program({reader, "-p", std::to_string(pid)}, kStackTimeout).lines);
    if (!stack.empty()) return {stack, {}, "", ""};
    return {{}, {}, "eu-stack could not read it (may it ptrace the worker?)", ""};
  }
  auto stack = py_spy(reader, pid, false);
  if (!stack)
    return {{}, {}, "py-spy could not read it (may it ptrace the worker? root, or CAP_SYS_PTRACE with Yama)", ""};
  Stacks out{std::move(*stack), {}, "", ""};
  // A CUDA rank whose Python frames say nothing may be waiting for the GPU: its native frames
  // tell (about 1.6 s for a torch process, against 20 ms without).
  if (classify(out.stack).empty() && uses_cuda(pid)) out.native = py_spy(reader, pid, true).value_or(out.native);
  return out;
}

/// py-spy for Python workers (DTLAUNCH_PY_SPY, else PATH, else beside the workers' interpreter, as
/// in a venv), eu-stack for others; "" when it is not there.
std::string find_stack_reader(const LaunchPlan& plan) {
  const char* path = std::getenv("PATH");
  const std::string path_env = path ? path : "/usr/local/bin:/usr/bin:/bin";
  if (!plan.python_workers) return find_executable("eu-stack", path_env).value_or("");
  if (const char* given = std::getenv("DTLAUNCH_PY_SPY")) return find_executable(given, path_env).value_or("");
  if (auto found = find_executable("py-spy", path_env)) return *found;
  const auto slash = plan.exec_path.rfind('/');
  if (slash == std::string::npos) return "";
  return find_executable(plan.exec_path.substr(0, slash + 1) + "py-spy", path_env).value_or("");
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

ProcUsage proc_usage(pid_t pid) {
  static const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcUsage usage;
  const auto stat = read_proc_stat(pid);
  if (!stat) return usage;
  usage.state = stat->state;
  usage.cpu_s = static_cast<double>(stat->cpu_ticks.value_or(0)) * tick_s;
  int budget = kMaxDescendants;
  add_descendants(pid, tick_s, usage, budget);  // data-loader workers, a compiler it waits on
  return usage;
}

HangWatcher::HangWatcher(asio::io_context& io, Console& console, const LaunchPlan& plan, RunLogDir& logs,
                         std::function<std::vector<Probe>()> probes, std::function<void(const Failure&)> fail)
    : io_(io),
      console_(console),
      plan_(plan),
      logs_(logs),
      probes_(std::move(probes)),
      fail_(std::move(fail)),
      timer_(io),
      watch_(std::chrono::milliseconds(static_cast<long>(plan.hang_timeout_s * 1000))),
      alive_(std::make_shared<bool>(true)),
      socket_(io, [this](StacksSocket::Reply reply) { answer(reply); }) {
  if (plan.hang_timeout_s <= 0 || !plan.python_workers) return;
  no_ptrace_ = ptrace_denied();
  if (no_ptrace_.empty()) return;
  const auto dir = logs.path() / "python";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (auto why = config::write_file_atomically((dir / "sitecustomize.py").string(), kSiteCustomize); !why.empty()) {
    spdlog::warn("no stacks of hung ranks: ptrace is not allowed here ({}), and {}", no_ptrace_, why);
    no_ptrace_.clear();
    return;
  }
  site_dir_ = dir.string();
  spdlog::info(
      "ptrace is not allowed here ({}): a hung rank's stack comes from Python's faulthandler, which the "
      "workers register on signal {} (sitecustomize.py in {}, first on their PYTHONPATH)",
      no_ptrace_, stacks_signal(), site_dir_);
}

EnvPairs HangWatcher::worker_variables(const std::string& stacks_file,
                                       const std::optional<std::string>& python_path) const {
  if (site_dir_.empty()) return {};
  return {{"PYTHONPATH", python_path && !python_path->empty() ? site_dir_ + ":" + *python_path : site_dir_},
          {"DTLAUNCH_STACKS_SIGNAL", std::to_string(stacks_signal())},
          {"DTLAUNCH_STACKS_FILE", stacks_file}};
}

std::map<pid_t, std::string> HangWatcher::stacks_files() const {
  std::map<pid_t, std::string> files;
  if (site_dir_.empty()) return files;
  for (const auto& p : probes_()) files[p.pid] = p.stacks_file;
  return files;
}

HangWatcher::~HangWatcher() {
  *alive_ = false;
  if (reader_.joinable()) reader_.join();  // at most kStackTimeout: its handler never runs now
}

void HangWatcher::answer(const StacksSocket::Reply& reply) {
  if (job_wide_) {  // every node's ranks, through the rendezvous
    return job_wide_->gather([this, reply](const std::vector<std::string>& parts, const std::string& missing) {
      auto [hang, unreadable] = merged(parts);
      std::set<std::string> hosts;
      for (const auto& r : hang.ranks) hosts.insert(r.host);
      std::string text = "dtlaunch: the stacks of " + std::to_string(hang.ranks.size()) + " ranks on " +
                         std::to_string(hosts.size()) + " nodes:\n" + stacks_text(hang, posix::host_name(), how());
      if (!missing.empty()) text += "dtlaunch: no stacks came from " + missing + "\n";
      if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
      reply(text);
    });
  }
  now([this, reply](std::optional<Hang> hang) {
    if (!hang) return reply("dtlaunch: no rank runs now\n");
    reply("dtlaunch: the stacks of " + std::to_string(hang->ranks.size()) + " ranks on " + posix::host_name() +
          " (pid " + std::to_string(::getpid()) + "):\n" + stacks_text(*hang, posix::host_name(), how()));
  });
}

void HangWatcher::now(std::function<void(std::optional<Hang>)> done) {
  if (reading_) {  // a reading for a report is under way: after it
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, done, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) now(done);
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
  timer->async_wait([this, timer, done, probes, before, from, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    if (reading_) return now(done);
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

void HangWatcher::job_wide(std::optional<JobWide> hooks) { job_wide_ = std::move(hooks); }

void HangWatcher::part(size_t budget, std::function<void(std::string)> done) {
  now([this, budget, done](std::optional<Hang> hang) {
    Hang h = hang.value_or(Hang{});
    if (!pending_cause_.empty()) h.cause = std::exchange(pending_cause_, "");
    done(hang_part(h, posix::host_name(), how(), budget));
  });
}

std::pair<Hang, int> HangWatcher::merged(const std::vector<std::string>& parts) const {
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

std::optional<std::pair<int, std::string>> HangWatcher::job_report(const std::vector<std::string>& parts,
                                                                   const std::string& missing) {
  auto [hang, unreadable] = merged(parts);
  if (hang.ranks.empty()) {
    spdlog::warn("the job hangs, but no node sent its ranks' stacks{}",
                 missing.empty() ? "" : " (none from " + missing + ")");
    return std::nullopt;
  }
  const auto suspect = choose_suspect(hang);
  const std::string host = posix::host_name();
  std::string text = hang_report(hang, suspect, host, how(), plan_.hang_timeout_s);
  if (!missing.empty()) text += "dtlaunch: no stacks came from " + missing + "\n";
  if (unreadable) text += "dtlaunch: " + std::to_string(unreadable) + " node(s) sent what is not a part\n";
  console_.write(2, text);
  write_report(hang_report_json(hang, suspect, host, how(), plan_.hang_timeout_s));
  if (!plan_.on_hang_fail) return std::nullopt;
  // The suspect fails the job; without one, the lowest rank stands for it.
  const auto& r = hang.ranks[suspect.value_or(0)];
  return std::pair{r.rank, failure_message(hang, suspect ? &r : nullptr)};
}

void HangWatcher::verdict(int rank, const std::string& message) {
  if (!plan_.on_hang_fail) return;
  for (const auto& p : probes_()) {
    if (p.rank == rank) return fail_rank(p, message);
  }
}

void HangWatcher::write_report(const std::string& json) {
  const auto file =
      logs_.path() / ("attempt_" + std::to_string(attempt_)) / ("hang_" + std::to_string(++reports_) + ".json");
  if (auto why = config::write_file_atomically(file.string(), json); why.empty()) {
    wrote_report_ = true;
    spdlog::info("the hang's report is in {}", file.string());
  } else {
    spdlog::warn("cannot write the hang's report: {}", why);
  }
}

std::string HangWatcher::failure_message(const Hang& hang, const HungRank* suspect) {
  return "hang: " +
         (hang.cause.empty() ? "no rank printed for " + std::to_string(static_cast<long>(hang.quiet_s)) + " s"
                             : hang.cause) +
         " (" + (suspect ? "suspect: " + suspect->doing : std::string("no suspect")) + ")";
}

void HangWatcher::fail_rank(const Probe& p, const std::string& message) {
  Failure f = describe_failure(p.local_rank, p.rank, p.pid, 1 << 8, std::chrono::system_clock::now(), p.error_file);
  if (f.error_file == "<N/A>") f.message = message;
  fail_(f);
}

void HangWatcher::signal(std::string cause) {
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

void HangWatcher::start(int attempt) {
  if (plan_.hang_timeout_s <= 0) return;
  attempt_ = attempt;
  ++generation_;
  watch_.reset();
  watching_ = true;
  tick();
}

void HangWatcher::stop() {
  watching_ = false;
  ++generation_;
  timer_.cancel();
}

void HangWatcher::tick() {
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

std::vector<RankSample> HangWatcher::samples(const std::vector<Probe>& probes) {
  std::vector<RankSample> out;
  for (const auto& p : probes) {
    const auto usage = proc_usage(p.pid);
    out.push_back({p.rank, p.local_rank, p.pid, usage.state, usage.cpu_s, p.last_output});
  }
  return out;
}

void HangWatcher::read_stacks(Hang hang, bool current, std::function<void(Hang)> done) {
  reading_ = true;
  if (!stack_reader_) stack_reader_ = find_stack_reader(plan_);
  if (reader_.joinable()) reader_.join();
  reader_ = std::jthread([this, hang = std::move(hang), done = std::move(done), alive = alive_, current,
                          generation = generation_, reader = *stack_reader_, python = plan_.python_workers,
                          files = stacks_files()]() mutable {
    std::vector<std::future<Stacks>> reads;
    for (const auto& r : hang.ranks) {
      const std::string fallback = files.contains(r.pid) ? files.at(r.pid) : "";
      reads.push_back(std::async(std::launch::async, stacks_of, reader, python, r.pid, fallback));
    }
    for (size_t i = 0; i < reads.size(); ++i) {
      auto read = reads[i].get();
      hang.ranks[i].stack = std::move(read.stack);
      hang.ranks[i].native = std::move(read.native);
      hang.ranks[i].stack_error = std::move(read.error);
      hang.ranks[i].stack_by = std::move(read.by);
    }
    if (!*alive) return;
    asio::post(io_, [this, hang = std::move(hang), done = std::move(done), alive, current, generation]() mutable {
      if (!*alive) return;
      reading_ = false;
      if (!current || generation == generation_) done(std::move(hang));
    });
  });
}

std::string HangWatcher::how() const {
  if (!site_dir_.empty()) return "faulthandler";
  if (!stack_reader_ || stack_reader_->empty()) return "none";
  return plan_.python_workers ? "py-spy" : "eu-stack";
}

void HangWatcher::report(Hang hang, const std::vector<Probe>& probes) {
  const auto suspect = find_suspect(hang);
  const std::string host = posix::host_name();
  console_.write(2, hang_report(hang, suspect, host, how(), plan_.hang_timeout_s));
  write_report(hang_report_json(hang, suspect, host, how(), plan_.hang_timeout_s));
  if (!plan_.on_hang_fail) return;
  // The suspect fails the group; without one, the lowest rank stands for the job.
  const auto& r = hang.ranks[suspect.value_or(0)];
  for (const auto& p : probes) {
    if (p.pid == r.pid) return fail_rank(p, failure_message(hang, suspect ? &r : nullptr));
  }
}

}  // namespace dtl::launcher
