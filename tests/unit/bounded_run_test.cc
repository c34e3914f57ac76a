#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "node/bounded_run.h"

using namespace dtl::node;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

BoundedOutput sh(const std::string& script, std::chrono::milliseconds timeout = 5s, size_t cap = 1 << 20,
                 int cancel_fd = -1) {
  return run_bounded({{"/bin/sh", "-c", script}, timeout, cap, cancel_fd});
}

/// Running, not a zombie waiting for whoever adopted it to reap it.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("bounded run: a program's output, its exit code and its first error line") {
  auto out = sh("echo one; echo two; echo 'Error: no such process' >&2; echo more >&2; exit 3");
  CHECK(out.end == BoundedOutput::End::exited);
  CHECK(out.code == 3);
  CHECK(out.output == "one\ntwo\n");
  CHECK(out.error == "Error: no such process");
  CHECK(describe(out, "py-spy", 10s) == "py-spy exited 3: Error: no such process");
  CHECK(sh("kill -TERM $$").end == BoundedOutput::End::signalled);
  const auto missing = run_bounded({{"/nonexistent/py-spy", "dump"}});
  CHECK(missing.end == BoundedOutput::End::exited);
  CHECK(missing.code == 127);
  CHECK(missing.error.find("cannot execute /nonexistent/py-spy") != std::string::npos);
}

TEST_CASE("bounded run: one that closes its output and goes on is killed at the deadline, its children too") {
  const auto start = Clock::now();
  // prints the pid of a child that would outlive it, then closes stdout and sleeps
  auto out = sh("sleep 60 & echo $!; exec >&- 2>&-; sleep 60", 1500ms);
  const auto took = Clock::now() - start;
  CHECK(out.end == BoundedOutput::End::timed_out);
  CHECK(took < 4s);
  CHECK(describe(out, "eu-stack", 1500ms) == "eu-stack did not finish within 1 s");
  const pid_t child = std::stoi(out.output);
  for (int i = 0; i < 100 && alive(child); ++i) std::this_thread::sleep_for(10ms);
  CHECK_FALSE(alive(child));
}

TEST_CASE("bounded run: output past the cap ends it at once") {
  const auto start = Clock::now();
  auto out = sh("yes 0123456789abcdef", 10s, 1 << 20);
  CHECK(out.end == BoundedOutput::End::too_much);
  CHECK(out.output.size() <= (1u << 20));
  CHECK(Clock::now() - start < 5s);
}

TEST_CASE("bounded run: the cancel fd ends it at once") {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::thread canceller([fd] {
    std::this_thread::sleep_for(200ms);
    const uint64_t one = 1;
    CHECK(::write(fd, &one, sizeof one) == sizeof one);
  });
  const auto start = Clock::now();
  auto out = sh("sleep 30", 20s, 1 << 20, fd);
  canceller.join();
  ::close(fd);
  CHECK(out.end == BoundedOutput::End::cancelled);
  CHECK(Clock::now() - start < 5s);
}

TEST_CASE("bounded run: an exit the workers' waitpid(-1) took is handed back to the run waiting for it") {
  std::atomic<bool> done = false;
  BoundedOutput out;
  std::thread runner([&] {
    out = sh("echo started; sleep 0.3; exit 7");
    done = true;
  });
  // what the worker group's reaping does on every SIGCHLD, meanwhile
  while (!done) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) handed_exit(pid, status);
    std::this_thread::sleep_for(5ms);
  }
  runner.join();
  CHECK(out.end == BoundedOutput::End::exited);
  CHECK(out.code == 7);
  CHECK(out.output == "started\n");
}
