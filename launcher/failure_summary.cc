#include "launcher/failure_summary.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "base/posix.h"
#include "node/memcg.h"
#include "base/text.h"

namespace dtl::launcher {
namespace {

constexpr const char* kTracebackHint = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";

/// torchrun's error file is JSON, which yaml-cpp reads as YAML. The message is either a string, or
/// {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": ...}}: the callstack is shown
/// when present, else the message.
bool read_error_file(const std::string& path, std::string& message, int64_t& timestamp) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  try {
    YAML::Node root = YAML::Load(text.str());
    YAML::Node m = root["message"];
    if (!m) return false;
    if (m.IsScalar()) {
      message = m.as<std::string>();
      if (root["timestamp"]) timestamp = std::stoll(root["timestamp"].as<std::string>());
    } else {
      YAML::Node info = m["extraInfo"];
      if (info && info["py_callstack"]) {
        message = info["py_callstack"].as<std::string>();
      } else {
        message = m["message"] ? m["message"].as<std::string>() : "<N/A>";
      }
      if (info && info["timestamp"]) timestamp = std::stoll(info["timestamp"].as<std::string>());
    }
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return true;
  } catch (const std::exception& e) {
    message = "unreadable error file " + path + ": " + e.what();
    return true;
  }
}

std::string format_time(long long epoch_s) {
  std::time_t t = static_cast<std::time_t>(epoch_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

}  // namespace

Failure describe_failure(int local_rank, int rank, pid_t pid, int wait_status,
                         std::chrono::system_clock::time_point observed, const std::string& error_file_path) {
  using std::chrono::duration_cast;
  Failure f;
  f.local_rank = local_rank;
  f.rank = rank;
  f.pid = pid;
  f.observed_ns = duration_cast<std::chrono::nanoseconds>(observed.time_since_epoch()).count();
  f.exitcode = WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  f.timestamp_s = duration_cast<std::chrono::seconds>(observed.time_since_epoch()).count();
  f.error_file = "<N/A>";
  if (read_error_file(error_file_path, f.message, f.timestamp_s)) {
    f.error_file = error_file_path;
  } else if (f.exitcode < 0) {
    f.message = "Signal " + std::to_string(-f.exitcode) + " (" + posix::signal_name(-f.exitcode) + ") received by PID " +
                std::to_string(pid);
  } else {
    f.message = kTracebackHint;
  }
  return f;
}

std::string format_summary(const std::string& program, const std::vector<Failure>& failures,
                           const std::string& host) {
  std::vector<const Failure*> by_rank;
  for (const auto& f : failures) by_rank.push_back(&f);
  std::sort(by_rank.begin(), by_rank.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  const Failure* root = &root_cause(failures);

  const std::string title = program + " FAILED";
  size_t width = title.size();
  std::string root_text;
  std::vector<std::string> others;
  for (size_t idx = 0; idx < by_rank.size(); ++idx) {
    const Failure& f = *by_rank[idx];
    std::ostringstream s;
    s << "[" << idx << "]:\n"
      << "  time      : " << format_time(f.timestamp_s) << "\n"
      << "  host      : " << (f.host.empty() ? host : f.host) << "\n"
      << "  rank      : " << f.rank << " (local_rank: " << f.local_rank << ")\n"
      << "  exitcode  : " << f.exitcode << " (pid: " << f.pid << ")\n"
      << "  error_file: " << f.error_file << "\n";
    if (f.peak_rss_kb > 0) s << "  peak_rss  : " << node::format_bytes(static_cast<uint64_t>(f.peak_rss_kb) * 1024) << "\n";
    s
      << "  traceback : " << text::replace_all(f.message, "\n", "\n  ");
    std::string text = s.str();
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) width = std::max(width, line.size());
    if (&f == root) {
      root_text = text;
    } else {
      others.push_back(text);
    }
  }
  width = std::min<size_t>(width, 60);
  std::string other_text;
  for (const auto& o : others) other_text += (other_text.empty() ? "" : "\n") + o;
  if (other_text.empty()) other_text = "  <NO_OTHER_FAILURES>";
  const std::string border(width, '='), section(width, '-');
  return border + "\n" + title + "\n" + section + "\nFailures:\n" + other_text + "\n" + section +
         "\nRoot Cause (first observed failure):\n" + root_text + "\n" + border;
}

}  // namespace dtl::launcher
