// `dtlaunch top [PID] [--json] [--once]`: every rank of a running job of this user, refreshed every
// second from the job's own dtlaunch (watch/stacks_socket.h, its `ranks` ask), which gathers every
// node's ranks through the rendezvous; q quits. Without a terminal, one snapshot.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <iostream>

#include "base/posix.h"
#include "base/printable.h"
#include "base/text.h"
#include "commands/commands.h"
#include "commands/top_screen.h"
#include "watch/job_ask.h"
#include "watch/job_figures.h"

namespace dtl::commands {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRefresh = std::chrono::seconds(1);
constexpr auto kAskTimeout = std::chrono::seconds(10);  ///< a gathering over nodes takes at most 3 s
constexpr const char* kWho = "dtlaunch top";

struct TopOptions {
  std::optional<pid_t> pid;
  bool json = false;
  bool once = false;
  bool stream = false;  ///< a JSON snapshot per line every second until stdin ends (the fan-out's relay)
};

/// The terminal in the mode top draws in: no echo, keys as typed, the alternate screen, no cursor;
/// as it was when this goes. The signals that end top arrive through a signalfd, so that leaving
/// always puts the terminal back.
class Screen {
 public:
  Screen() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, &blocked_);
    signals_ = signalfd(-1, &set, SFD_CLOEXEC);
    if (tcgetattr(0, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      raw_ = tcsetattr(0, TCSANOW, &raw) == 0;
    }
    posix::write_all(1, "\x1b[?1049h\x1b[?25l");
  }
  ~Screen() {
    posix::write_all(1, "\x1b[?25h\x1b[?1049l");
    if (raw_) tcsetattr(0, TCSANOW, &saved_);
    if (signals_ >= 0) ::close(signals_);
    sigprocmask(SIG_SETMASK, &blocked_, nullptr);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  std::pair<size_t, size_t> size() const {
    winsize ws{};
    if (ioctl(1, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return {80, 24};
    return {ws.ws_col, ws.ws_row};
  }
  /// Draws `lines` from the top left, clipped to the screen.
  void draw(std::vector<std::string> lines, const std::string& footer) {
    const auto [cols, rows] = size();
    const size_t room = rows > 1 ? rows - 1 : 1;
    if (lines.size() > room) {
      const size_t hidden = lines.size() - room + 1;
      lines.resize(room - 1);
      lines.push_back("... " + std::to_string(hidden) + " more rows (a taller terminal shows them)");
    }
    std::string out = "\x1b[H";
    for (const auto& l : lines) out += l.substr(0, cols) + "\x1b[K\r\n";
    out += "\x1b[J" + footer.substr(0, cols);
    posix::write_all(1, out);
  }
  enum class Event { tick, redraw, quit };
  /// Waits until `until` for a key or a signal.
  Event wait(Clock::time_point until) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return Event::tick;
      pollfd fds[2] = {{0, POLLIN, 0}, {signals_, POLLIN, 0}};
      if (::poll(fds, 2, static_cast<int>(left)) < 0) continue;
      if (fds[1].revents & POLLIN) {
        signalfd_siginfo info{};
        if (::read(signals_, &info, sizeof info) == sizeof info) {
          return info.ssi_signo == SIGWINCH ? Event::redraw : Event::quit;
        }
      }
      if (fds[0].revents & (POLLHUP | POLLERR)) return Event::quit;
      if (fds[0].revents & POLLIN) {
        char key = 0;
        if (::read(0, &key, 1) != 1) return Event::quit;
        if (key == 'q' || key == 'Q') return Event::quit;
        if (key == 12) return Event::redraw;  // Ctrl-L
      }
    }
  }

 private:
  termios saved_{};
  bool raw_ = false;
  sigset_t blocked_{};
  int signals_ = -1;
};

/// Whether the job is still running here.
bool running(pid_t pid) {
  for (const auto& j : watch::live_jobs()) {
    if (j.pid == pid) return true;
  }
  return false;
}

Result<watch::JobFigures> figures_of(const watch::LiveJob& job) {
  auto answer = watch::ask_job(job, "ranks", kAskTimeout);
  if (!answer) return tl::unexpected(answer.error());
  auto figures = watch::parse_figures(*answer);
  if (!figures) return fail("the job of pid " + std::to_string(job.pid) + " answered " + printable(*answer, 80), 1);
  return *figures;
}

/// Shows the job until q or a signal (false), or until the job ends (true).
bool show(const watch::LiveJob& job) {
  Screen screen;
  std::optional<watch::JobFigures> shown;
  std::string problem;
  auto next = Clock::now();
  const std::string footer = "q quits; refreshed every second (dtlaunch " + std::to_string(job.pid) + ")";
  while (true) {
    if (auto figures = figures_of(job)) {
      shown = std::move(*figures);
      problem.clear();
    } else if (!running(job.pid)) {
      break;
    } else {
      problem = figures.error().message;
    }
    next = std::max(next + kRefresh, Clock::now());
    for (auto event = Screen::Event::redraw; event != Screen::Event::tick; event = screen.wait(next)) {
      if (event == Screen::Event::quit) return false;
      auto lines = shown ? top_lines(*shown, screen.size().first) : std::vector<std::string>{};
      if (!problem.empty()) lines.push_back(problem);
      screen.draw(std::move(lines), footer);
    }
  }
  return true;
}

/// `--stream`: what the fan-out relays from its first host.
int stream(const watch::LiveJob& job) {
  auto next = Clock::now();
  while (true) {
    auto answer = watch::ask_job(job, "ranks", kAskTimeout);
    if (!answer) {
      std::cerr << error_line(answer.error(), kWho);
      return 1;
    }
    std::string line = *answer;
    std::erase(line, '\n');
    if (!posix::write_all(1, line + "\n")) return 0;
    next = std::max(next + kRefresh, Clock::now());
    pollfd in{0, POLLIN, 0};
    while (Clock::now() < next) {
      const int ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count());
      if (::poll(&in, 1, std::max(ms, 1)) > 0) {
        char buf[256];
        if (::read(0, buf, sizeof buf) <= 0) return 0;  // the relay is over
      }
    }
  }
}

const char* kUsage =
    "usage: dtlaunch top [PID] [--json] [--once]\n"
    "Shows every rank of the dtlaunch job of yours running on this machine (PID: its dtlaunch's, when\n"
    "several run), over every node of the job: what each rank is doing, its CPU, memory and GPU, the\n"
    "job's restarts and the seconds since each rank's last output, refreshed every second; q quits.\n"
    "Without a terminal, or with --once, it prints one snapshot; --json prints one as JSON. The\n"
    "figures come from /proc and NVML: reading them never pauses a worker.\n";

}  // namespace

int run_top(const std::vector<std::string>& args, const EnvLookup& env) {
  TopOptions o;
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--json") {
      o.json = true;
    } else if (a == "--once") {
      o.once = true;
    } else if (a == "--stream") {
      o.stream = true;
    } else if (auto n = text::to_long(a); n && *n > 0 && !o.pid) {
      o.pid = static_cast<pid_t>(*n);
    } else {
      std::cerr << error_line(Error{"expected the pid of a dtlaunch, --json or --once, got " + printable(a, 40)}, kWho)
                << kUsage;
      return 2;
    }
  }
  auto job = watch::find_job(o.pid);
  if (!job) {
    std::cerr << error_line(job.error(), kWho);
    return job.error().exit_code;
  }
  if (o.stream) return stream(*job);
  const auto term = env("TERM");
  const bool terminal = isatty(0) && isatty(1) && term && *term != "dumb" && !term->empty();
  if (terminal && !o.json && !o.once) {
    if (show(*job)) std::cout << "dtlaunch top: the job of pid " << job->pid << " ended\n";
    return 0;
  }
  auto figures = figures_of(*job);
  if (!figures) {
    std::cerr << error_line(figures.error(), kWho);
    return figures.error().exit_code;
  }
  if (o.json) {
    std::cout << watch::figures_json(*figures) << "\n";
  } else {
    for (const auto& line : top_lines(*figures, 80)) std::cout << line << "\n";
  }
  return 0;
}

}  // namespace dtl::commands
