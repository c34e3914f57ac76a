#include "watch/stack_reader.h"

#include <fcntl.h>
#include <poll.h>
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
#include <filesystem>
#include <optional>
#include <sstream>

#include "base/posix.h"
#include "node/bounded_run.h"
#include "node/process.h"
#include "watch/stacks.h"

namespace dtl::watch {

namespace {

constexpr const char* kSiteCustomize =
    R"(# Written by dtlaunch: stacks of hung ranks without py-spy or ptrace (see dtlaunch's docs, hangs).
import os
import sys


def _dtlaunch_register():
    signum, path = os.environ.get("DTLAUNCH_STACKS_SIGNAL"), os.environ.get("DTLAUNCH_STACKS_FILE")
    if signum and path:
        import faulthandler
        out = open(path, "a")
        faulthandler.register(int(signum), file=out, all_threads=True, chain=False)
        # dtlaunch signals only a process that said here that it took the signal over
        out.write(f"dtlaunch: faulthandler registered in pid {os.getpid()}\n")
        out.flush()


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
)";

constexpr const char* kHookMark = "dtlaunch: faulthandler registered in pid ";

/// A reader's output as stacks, or why there are none.
Stacks read_with(const std::string& tool, std::vector<std::string> argv, const ReadLimits& limits, bool eu_stack) {
  node::BoundedRun run{std::move(argv),  limits.timeout,   kReaderOutputCap,
                       limits.cancel_fd, limits.cgroup_fd, limits.cgroup_procs_fd};
  const auto out = node::run_bounded(run);
  Stacks s;
  s.by = tool;
  const bool ran = out.end == node::BoundedOutput::End::exited;
  // eu-stack exits 1 when one thread could not be read, with the others' frames printed
  if (eu_stack && ran) {
    std::vector<std::string> lines;
    std::istringstream text(out.output);
    for (std::string line; std::getline(text, line);) lines.push_back(line);
    s.stack = parse_eu_stack(lines);
  } else if (!eu_stack && ran && out.code == 0) {
    auto stack = parse_py_spy(out.output);
    if (!stack) {
      s.error = tool + "'s output is not a stack (" + std::to_string(out.output.size()) + " bytes)";
      return s;
    }
    s.stack = std::move(*stack);
  }
  if (s.stack.empty() && s.error.empty()) {
    s.error = ran && out.code == 0 ? tool + " found no thread" : node::describe(out, tool, limits.timeout);
  }
  return s;
}

/// The pids whose hook registered in `file`, in order.
std::vector<pid_t> hooked_pids(const std::string& file) {
  std::vector<pid_t> pids;
  std::istringstream text(posix::read_small_file(file, 1 << 20));
  for (std::string line; std::getline(text, line);) {
    if (!line.starts_with(kHookMark)) continue;
    try {
      pids.push_back(static_cast<pid_t>(std::stol(line.substr(std::strlen(kHookMark)))));
    } catch (const std::exception&) {
    }
  }
  return pids;
}

/// The rank's stack from faulthandler: the signal to `pid`'s main thread, then what it appended to
/// `file`. nullopt when nothing came within a second.
std::optional<std::vector<std::string>> faulthandler_stack(pid_t pid, const std::string& file, int cancel_fd) {
  struct stat st {};
  const off_t before = ::stat(file.c_str(), &st) == 0 ? st.st_size : 0;
  if (::syscall(SYS_tgkill, pid, pid, stacks_signal()) != 0) return std::nullopt;
  off_t seen = before;
  // faulthandler writes in its signal handler, a few writes per frame: done once the size holds.
  for (int i = 0; i < 100; ++i) {
    pollfd cancel{cancel_fd, POLLIN, 0};
    if (posix::retry_eintr([&] { return ::poll(&cancel, 1, 10); }) > 0) return std::nullopt;
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

Stacks from_hook(pid_t rank_pid, pid_t python_pid, const std::string& file, int cancel_fd) {
  const auto pids = hooked_pids(file);
  const auto registered = [&](pid_t p) { return std::find(pids.begin(), pids.end(), p) != pids.end(); };
  const pid_t target = registered(python_pid) ? python_pid : registered(rank_pid) ? rank_pid : 0;
  Stacks s;
  s.by = "faulthandler";
  if (!target) {
    s.error = "dtlaunch's faulthandler hook is not loaded in it (python -I, -E or -S, or a PYTHONPATH of its own?)";
    return s;
  }
  if (auto stack = faulthandler_stack(target, file, cancel_fd)) {
    s.stack = std::move(*stack);
  } else {
    s.error = "faulthandler did not answer the signal within a second";
  }
  return s;
}

}  // namespace

int stacks_signal() { return SIGRTMIN + 6; }

std::string site_customize(std::string_view more) {
  return std::string(kSiteCustomize) + std::string(more) + "\n_dtlaunch_next_sitecustomize()\n";
}

std::string ptrace_denied() {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return "";
  const pid_t parent = getpid();
  const pid_t target = fork();
  if (target == 0) {
    // A fork that holds dtlaunch's descriptors (the orphan guard's pipe among them) must not
    // outlive it, even when dtlaunch died before the death signal was asked for.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
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
      if (getppid() != parent) _exit(1);
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

StackTools find_stack_tools(const std::string& exec_path) {
  const char* path = std::getenv("PATH");
  const std::string path_env = path ? path : "/usr/local/bin:/usr/bin:/bin";
  StackTools tools;
  tools.eu_stack = posix::find_executable("eu-stack", path_env).value_or("");
  const auto beside = [&](const std::string& file) -> std::optional<std::string> {
    const auto slash = file.rfind('/');
    if (slash == std::string::npos) return std::nullopt;
    return posix::find_executable(file.substr(0, slash + 1) + "py-spy", path_env);
  };
  if (const char* given = std::getenv("DTLAUNCH_PY_SPY")) {
    tools.py_spy = posix::find_executable(given, path_env).value_or("");
  } else if (auto found = posix::find_executable("py-spy", path_env)) {
    tools.py_spy = *found;
  } else if (auto by_python = beside(exec_path)) {  // the workers' venv
    tools.py_spy = *by_python;
  } else {  // dtlaunch's own: pip's wheel puts py-spy beside it
    std::error_code ec;
    tools.py_spy = beside(std::filesystem::read_symlink("/proc/self/exe", ec).string()).value_or("");
  }
  return tools;
}

Stacks read_rank(const StackTools& tools, pid_t rank_pid, const std::string& hook_file, const ReadLimits& limits) {
  const auto rank = node::rank_process(rank_pid);
  const std::string pid = std::to_string(rank.pid);
  Stacks s;
  if (rank.kind.python) {
    if (tools.hook) {
      s = from_hook(rank_pid, rank.pid, hook_file, limits.cancel_fd);
      if (rank.pid != rank_pid) s.read_pid = rank.pid;
      return s;
    }
    if (tools.py_spy.empty()) {
      s.by = "py-spy";
      s.error = "py-spy is not installed (pip install py-spy, or set DTLAUNCH_PY_SPY)";
      return s;
    }
    s = read_with("py-spy", {tools.py_spy, "dump", "--pid", pid, "--json"}, limits, false);
    // Python frames that place the rank nowhere: its native frames may (a CUDA synchronisation,
    // c10d's Work::wait under a C extension), at about 1.6 s for a torch process against 20 ms.
    if (!s.stack.empty() && classify(s.stack).empty()) {
      auto native = read_with("py-spy", {tools.py_spy, "dump", "--pid", pid, "--json", "--native"}, limits, false);
      s.native = std::move(native.stack);
    }
  } else if (!tools.no_ptrace.empty()) {
    s.by = "eu-stack";
    s.error = "native code, and ptrace is not allowed here (" + tools.no_ptrace + ")";
    return s;
  } else if (tools.eu_stack.empty()) {
    s.by = "eu-stack";
    s.error = "native code, and eu-stack is not installed (apt install elfutils)";
    return s;
  } else {
    s = read_with("eu-stack", {tools.eu_stack, "-p", pid}, limits, true);
  }
  if (rank.pid != rank_pid) s.read_pid = rank.pid;
  return s;
}

}  // namespace dtl::watch
