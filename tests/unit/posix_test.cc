#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/posix.h"

using namespace dtl;
using namespace std::chrono_literals;

namespace {

/// Both ends of a pipe, closed when this goes.
struct Pipe {
  int read = -1, write = -1;
  explicit Pipe(int flags = 0) {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC | flags) == 0);
    read = fds[0];
    write = fds[1];
  }
  void close_write() {
    ::close(write);
    write = -1;
  }
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

/// The state letter of thread `tid` in /proc ('S': asleep in a system call such as read).
char thread_state(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close_paren = stat.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= stat.size() ? '?' : stat[close_paren + 2];
}

std::atomic<int> g_interruptions{0};
void count_interruption(int) { ++g_interruptions; }

}  // namespace

TEST_CASE("write_all writes everything to a non-blocking pipe that is full, waiting for the reader") {
  Pipe p(O_NONBLOCK);
  std::string filler(4096, 'f');
  while (::write(p.write, filler.data(), filler.size()) > 0) {
  }
  REQUIRE(errno == EAGAIN);
  const size_t full = static_cast<size_t>(fcntl(p.write, F_GETPIPE_SZ));
  const std::string data(3 * full + 123, 'x');
  std::string received;
  std::thread reader([&] {
    pollfd pfd{p.read, POLLIN, 0};
    char buf[65536];
    while (received.size() < full + data.size() && poll(&pfd, 1, 10000) == 1) {
      long n = ::read(p.read, buf, sizeof buf);
      if (n <= 0) break;
      received.append(buf, static_cast<size_t>(n));
    }
  });
  const bool ok = posix::write_all(p.write, data);
  reader.join();
  CHECK(ok);
  REQUIRE(received.size() == full + data.size());
  CHECK(received.substr(full) == data);
}

TEST_CASE("write_all says false once the reader is gone") {
  auto previous = signal(SIGPIPE, SIG_IGN);
  Pipe p;
  ::close(p.read);
  p.read = -1;
  CHECK_FALSE(posix::write_all(p.write, "nobody reads this"));
  CHECK(errno == EPIPE);
  signal(SIGPIPE, previous);
}

TEST_CASE("read_all reads up to its limit and says when there was more") {
  Pipe p;
  REQUIRE(posix::write_all(p.write, "hello world"));
  p.close_write();
  auto got = posix::read_all(p.read, 5);
  CHECK(got.text == "hello");
  CHECK(got.too_large);
  CHECK(got.error == 0);

  Pipe exact;
  REQUIRE(posix::write_all(exact.write, "hello"));
  exact.close_write();
  got = posix::read_all(exact.read, 5);
  CHECK(got.text == "hello");
  CHECK_FALSE(got.too_large);

  Pipe unlimited;
  REQUIRE(posix::write_all(unlimited.write, std::string(50000, 'z')));
  unlimited.close_write();
  got = posix::read_all(unlimited.read);
  CHECK(got.text == std::string(50000, 'z'));
  CHECK_FALSE(got.too_large);
}

TEST_CASE("read_all gives the errno of a read that fails") {
  auto got = posix::read_all(-1);
  CHECK(got.error == EBADF);
  CHECK(got.text.empty());
}

TEST_CASE("read_some goes on reading when a signal interrupts it") {
  struct sigaction sa {}, previous{};
  sa.sa_handler = count_interruption;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the kernel hands the EINTR to read_some
  sigaction(SIGUSR1, &sa, &previous);
  Pipe p;
  const pid_t reader_tid = static_cast<pid_t>(syscall(SYS_gettid));
  const pthread_t reader = pthread_self();
  g_interruptions = 0;
  std::thread interrupter([&] {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    auto wait_for_read = [&] {
      while (thread_state(reader_tid) != 'S' && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    };
    for (int i = 0; i < 3; ++i) {
      wait_for_read();
      const int before = g_interruptions;
      pthread_kill(reader, SIGUSR1);
      while (g_interruptions == before && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    wait_for_read();
    posix::write_all(p.write, "x");
  });
  char c = 0;
  const long n = posix::read_some(p.read, &c, 1);
  interrupter.join();
  sigaction(SIGUSR1, &previous, nullptr);
  CHECK(g_interruptions == 3);
  CHECK(n == 1);
  CHECK(c == 'x');
}

TEST_CASE("run_program gives a program's output lines and its exit code, not its stderr") {
  auto run = posix::run_program({"sh", "-c", "printf 'one\\ntwo\\n\\nlast'; echo oops >&2; exit 3"}, 10s);
  CHECK(run.lines == std::vector<std::string>{"one", "two", "", "last"});
  CHECK(run.exit_code == 3);

  run = posix::run_program({"sh", "-c", "echo ok"}, 10s);
  CHECK(run.lines == std::vector<std::string>{"ok"});
  CHECK(run.exit_code == 0);
}

TEST_CASE("run_program of a program that does not exist gives no lines and no exit code") {
  auto run = posix::run_program({"dtl-no-such-program-here"}, 10s);
  CHECK(run.lines.empty());
  CHECK_FALSE(run.exit_code);
}

TEST_CASE("run_program kills a program that runs past its time") {
  const auto start = std::chrono::steady_clock::now();
  auto run = posix::run_program({"sh", "-c", "echo started; exec sleep 30"}, 200ms);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(run.lines == std::vector<std::string>{"started"});
  CHECK_FALSE(run.exit_code);
}

TEST_CASE("run_program stops at a poll error as at a timeout, instead of reading past its deadline") {
  const auto failing_poll = [](pollfd*, nfds_t, int) {
    errno = ENOMEM;
    return -1;
  };
  const auto start = std::chrono::steady_clock::now();
  auto run = posix::run_program({"sh", "-c", "exec sleep 3"}, 10s, failing_poll);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK_FALSE(run.exit_code);
}

TEST_CASE("a library that is missing loads as empty, and a present one gives its functions") {
  posix::Library missing("libdtl-no-such-library.so.1");
  CHECK_FALSE(missing);
  CHECK(missing.function<int()>("getpid") == nullptr);

  posix::Library libc("libc.so.6");
  REQUIRE(libc);
  auto own_pid = libc.function<pid_t()>("getpid");
  REQUIRE(own_pid != nullptr);
  CHECK(own_pid() == getpid());
  CHECK(libc.function<int()>("dtl_no_such_symbol") == nullptr);
}

TEST_CASE("the CPU count is the affinity mask's, within those online") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(posix::cpu_count() == CPU_COUNT(&set));
  CHECK(posix::cpu_count() <= posix::online_cpu_count());
  CHECK_FALSE(posix::host_name().empty());
}

TEST_CASE("host_addresses lists this machine's addresses as hostname -I does: no loopback, no link-local") {
  const auto mine = posix::host_addresses();
  for (const auto& a : mine) {
    CHECK(a.rfind("127.", 0) != 0);
    CHECK(a != "::1");
    CHECK(a.rfind("fe80:", 0) != 0);
  }
  // The oracle, where Debian's hostname is installed: the same addresses in the same order.
  auto real = posix::run_program({"hostname", "-I"}, std::chrono::seconds(10));
  if (!real.exit_code || *real.exit_code != 0 || real.lines.empty()) return;
  std::istringstream words(real.lines[0]);
  std::vector<std::string> expected;
  for (std::string w; words >> w;) expected.push_back(w);
  CHECK(mine == expected);
}

TEST_CASE("signals are named as the kernel names them, numbers without a name as SIG<n>") {
  CHECK(posix::signal_name(SIGTERM) == "SIGTERM");
  CHECK(posix::signal_name(SIGKILL) == "SIGKILL");
  CHECK(posix::signal_name(SIGRTMIN + 6).starts_with("SIG"));
}
