#include "fanout/fanout_state.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/printable.h"

namespace dtl::fanout {
using namespace action;

namespace {

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

int code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

constexpr size_t kMaxErrorLine = 4096;

}  // namespace

FanoutState::FanoutState(std::vector<Host> hosts, bool master_from_first_host, double stop_timeout_s,
                         std::string version)
    : hosts_(std::move(hosts)),
      state_(hosts_.size()),
      master_from_first_host_(master_from_first_host),
      stop_timeout_s_(stop_timeout_s),
      version_(std::move(version)) {}

FanoutState::Actions FanoutState::start() { return {Arm{Timer::preflight, kPreflightTimeout}}; }

FanoutState::Actions FanoutState::on_hello(size_t host, std::string_view line) {
  Actions a;
  auto said = parse_hello(line);
  if (!said || said->version != version_) {
    fail_preflight(host,
                   said ? "runs " + printable(said->version, 40) + ", not this dtlaunch " + version_
                        : "said " + printable(line, 120) + " instead of hello",
                   a);
    return a;
  }
  state_[host].answered = true;
  state_[host].addresses = std::move(said->addresses);
  if (std::all_of(state_.begin(), state_.end(), [](const HostState& h) { return h.answered; })) go(a);
  return a;
}

void FanoutState::on_error_output(size_t host, std::string_view chunk) {
  auto& h = state_[host];
  h.error_partial.append(chunk);
  size_t begin = 0;
  for (size_t eol; (eol = h.error_partial.find('\n', begin)) != std::string::npos; begin = eol + 1) {
    std::string line = h.error_partial.substr(begin, eol - begin);
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) h.last_error_line = std::move(line);
  }
  h.error_partial.erase(0, begin);
  if (h.error_partial.size() > kMaxErrorLine) h.error_partial.erase(0, h.error_partial.size() - kMaxErrorLine);
}

FanoutState::Actions FanoutState::on_exit(size_t host, int status) {
  Actions a;
  auto& h = state_[host];
  h.status = status;
  // What is left in its ssh's process group (a wrapper's child, a forked helper) is no part of the job.
  a.push_back(Kill{host, SIGKILL});
  if (!started_) {
    // Gone before the job started: it cannot start. Its ssh's last word says why, once it is read.
    fail_preflight(host,
                   h.answered ? "ended after its hello with " + describe(status) + ", before the job started" : "", a);
  } else if (code(status) != 0 && !stopping_) {
    // One host's agent gone with a failure: the static job cannot go on without it.
    first_failure_ = code(status);
    a.push_back(Write{2, "dtlaunch: host " + hosts_[host].name + "'s agent ended with " + describe(status) +
                             "; stopping the other hosts\n"});
    stop(a);
  }
  maybe_finish(a);
  return a;
}

FanoutState::Actions FanoutState::on_output_closed(size_t host) {
  Actions a;
  auto& h = state_[host];
  h.output_open = false;
  if (!h.error_partial.empty()) on_error_output(host, "\n");
  maybe_finish(a);
  return a;
}

FanoutState::Actions FanoutState::on_signal(int sig) {
  Actions a;
  if (passed_on(sig)) {
    // For the workers (a checkpoint before a pre-emption): before the job starts there are none.
    if (!started_ || stopping_) return a;
    for (size_t i = 0; i < hosts_.size(); ++i) {
      if (!state_[i].status) a.push_back(Send{i, encode_signal(sig)});
    }
    return a;
  }
  if (stopping_) {  // a second Ctrl-C: no more waiting for the hosts
    kill_running(SIGTERM, a);
    return a;
  }
  a.push_back(Write{2, "dtlaunch: stopping " + std::to_string(hosts_.size()) +
                           (hosts_.size() == 1 ? " host (" : " hosts (") + strsignal(sig) + ")\n"});
  signal_ = sig;
  stop(a);
  return a;
}

FanoutState::Actions FanoutState::on_timer(Timer timer) {
  Actions a;
  switch (timer) {
    case Timer::preflight:
      for (size_t i = 0; i < hosts_.size() && !started_ && !stopping_; ++i) {
        if (!state_[i].answered) {
          fail_preflight(i, "no answer in " + std::to_string(kPreflightTimeout.count() / 1000) + " s", a);
        }
      }
      break;
    case Timer::kill:
      kill_running(kill_signal_, a);
      if (kill_signal_ == SIGTERM) {
        kill_signal_ = SIGKILL;
        a.push_back(Arm{Timer::kill, std::chrono::seconds(5)});
      }
      break;
    case Timer::drain:  // every ssh ended long enough ago: what still holds its pipes is not a host
      for (auto& h : state_) h.output_open = false;
      maybe_finish(a);
      break;
  }
  return a;
}

void FanoutState::fail_preflight(size_t host, std::string why, Actions& a) {
  // Already stopping: a host that fails now is a consequence (of Ctrl-C, of the first failure).
  if (stopping_ || started_ || failed_host_) return;
  failed_host_ = host;
  failure_ = std::move(why);
  stop(a);
}

std::string FanoutState::preflight_error() const {
  const auto& h = state_[*failed_host_];
  std::string why = failure_;
  if (why.empty()) {
    why = !h.last_error_line.empty() ? printable(h.last_error_line, 300)
          : h.status                 ? "ssh ended with " + describe(*h.status)
                                     : "ssh ended";
  }
  return error_line(Error{"host " + hosts_[*failed_host_].name + ": " + why + " (preflight; nothing was started)", 2});
}

void FanoutState::go(Actions& a) {
  // Stopped before the last answer (Ctrl-C, a failed host): nothing starts, and the kill timer stays.
  if (stopping_) return;
  started_ = true;
  a.push_back(Cancel{Timer::preflight});
  std::optional<std::string> master;
  if (master_from_first_host_) {
    const auto& first = hosts_.front().name;
    master = meeting_address(first, state_.front().addresses);
    a.push_back(Info{"the hosts meet at " + *master + " (" +
                     (*master == meeting_address(first, {}) ? std::string("the first host")
                                                            : "the first address host " + first + " has") +
                     "; --master_addr chooses another)"});
  }
  for (size_t i = 0; i < hosts_.size(); ++i) {
    auto vars = hosts_[i].variables;
    for (auto& [name, value] : vars) {
      if (master && name == "PET_MASTER_ADDR") value = *master;
    }
    a.push_back(Send{i, encode_variables(vars)});
  }
}

void FanoutState::stop(Actions& a) {
  if (stopping_) return;
  stopping_ = true;
  a.push_back(Cancel{Timer::preflight});
  for (size_t i = 0; i < hosts_.size(); ++i) {
    a.push_back(CloseInput{i});
    // A host that has not answered runs nothing yet, and ssh may wait on it for long: no grace period.
    if (!started_ && !state_[i].answered && !state_[i].status) a.push_back(Kill{i, SIGTERM});
  }
  a.push_back(Arm{Timer::kill, std::chrono::milliseconds(static_cast<long>((stop_timeout_s_ + 10) * 1000))});
}

void FanoutState::kill_running(int sig, Actions& a) {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (!state_[i].status) a.push_back(Kill{i, sig});
  }
}

void FanoutState::maybe_finish(Actions& a) {
  if (finished_) return;
  if (!std::all_of(state_.begin(), state_.end(), [](const HostState& h) { return h.status.has_value(); })) return;
  if (std::any_of(state_.begin(), state_.end(), [](const HostState& h) { return h.output_open; })) {
    if (!draining_) a.push_back(Arm{Timer::drain, kDrainTimeout});
    draining_ = true;
    return;
  }
  finished_ = true;
  for (auto t : {Timer::preflight, Timer::kill, Timer::drain}) a.push_back(Cancel{t});
  if (failed_host_) a.push_back(Write{2, preflight_error()});
  a.push_back(Finish{exit_code()});
}

/// A preflight failure: 2. A signal here: 128 + it. Else the code of the first host whose agent
/// ended with a failure before anything was stopped: every agent exits with the root cause's code
/// when the job fails, and a host whose agent died (ssh's 255) or never joined ends first. Else
/// the first host's.
int FanoutState::exit_code() const {
  if (failed_host_) return 2;
  if (signal_) return 128 + signal_;
  if (first_failure_) return first_failure_;
  for (const auto& h : state_) {
    if (code(*h.status) != 0) return code(*h.status);
  }
  return 0;
}

}  // namespace dtl::fanout
