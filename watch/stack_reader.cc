#include "watch/stack_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "base/posix.h"
#include "watch/stacks.h"

namespace dtl::watch {

namespace {

constexpr auto kStackTimeout = std::chrono::seconds(10);

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

}  // namespace

int stacks_signal() { return SIGRTMIN + 6; }

std::string_view site_customize() { return kSiteCustomize; }

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

Stacks read_stacks_of(const std::string& reader, bool python, pid_t pid, const std::string& fallback_file) {
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

std::string find_stack_reader(bool python_workers, const std::string& exec_path) {
  const char* path = std::getenv("PATH");
  const std::string path_env = path ? path : "/usr/local/bin:/usr/bin:/bin";
  if (!python_workers) return posix::find_executable("eu-stack", path_env).value_or("");
  if (const char* given = std::getenv("DTLAUNCH_PY_SPY")) return posix::find_executable(given, path_env).value_or("");
  if (auto found = posix::find_executable("py-spy", path_env)) return *found;
  const auto slash = exec_path.rfind('/');
  if (slash == std::string::npos) return "";
  return posix::find_executable(exec_path.substr(0, slash + 1) + "py-spy", path_env).value_or("");
}

}  // namespace dtl::watch
