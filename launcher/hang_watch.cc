#include "launcher/hang_watch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/text.h"

namespace dtl::launcher {

namespace {

/// Of one CPU over the window: computing, not waiting. A rank blocked in a collective or the store
/// uses next to none (0-1 % measured with gloo); one that computes on a machine shared three ways
/// still has a third.
constexpr double kBusyShare = 0.2;
constexpr const char* kCollective = "in a collective";
constexpr const char* kStore = "in the store";
constexpr const char* kGpu = "waiting for the GPU";

double seconds(HangClock::duration d) { return std::chrono::duration<double>(d).count(); }

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

/// The frames of the thread that says what a rank does: its main thread, else its first.
std::vector<std::string> main_thread(const std::vector<std::string>& stack) {
  std::vector<std::vector<std::string>> threads;
  std::optional<size_t> main;
  for (const auto& line : stack) {
    if (line.starts_with("thread ")) {
      if (!main && contains(line, "MainThread")) main = threads.size();
      threads.emplace_back();
    } else if (!line.empty()) {
      if (threads.empty()) threads.emplace_back();
      threads.back().push_back(line);
    }
  }
  if (threads.empty()) return {};
  return threads[main.value_or(0)];
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// "0-3,5" for ranks 0, 1, 2, 3 and 5.
std::string ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return text::ranges(ranks);
}

}  // namespace

HangWatch::HangWatch(std::chrono::milliseconds timeout, std::chrono::milliseconds window)
    : timeout_(timeout), window_(std::min(window, timeout)) {}

void HangWatch::reset() {
  seen_.clear();
  reported_at_.reset();
  signalled_ = false;
}

HangClock::time_point HangWatch::record(HangClock::time_point now, const std::vector<RankSample>& ranks) {
  std::erase_if(seen_, [&](const auto& entry) {
    return std::none_of(ranks.begin(), ranks.end(), [&](const RankSample& r) { return r.pid == entry.first; });
  });
  HangClock::time_point last = ranks.front().last_output;
  for (const auto& r : ranks) {
    auto& cpu = seen_[r.pid].cpu;
    cpu.emplace_back(now, r.cpu_s);
    // Keep the newest sample at or before the window's start as its base.
    while (cpu.size() > 2 && cpu[1].first <= now - window_) cpu.erase(cpu.begin());
    last = std::max(last, r.last_output);
  }
  return last;
}

Hang HangWatch::snapshot(HangClock::time_point now, HangClock::time_point last, const std::vector<RankSample>& ranks) {
  Hang hang{seconds(now - last), {}, ""};
  for (const auto& r : ranks) {
    const auto& cpu = seen_[r.pid].cpu;
    const double span = seconds(now - cpu.front().first);
    HungRank h;
    h.rank = r.rank;
    h.local_rank = r.local_rank;
    h.pid = r.pid;
    h.state = r.state;
    h.cpu_percent = span > 0 ? 100 * (r.cpu_s - cpu.front().second) / span : 0;
    h.quiet_s = seconds(now - r.last_output);
    h.busy = h.cpu_percent >= 100 * kBusyShare && r.state != 'D';
    hang.ranks.push_back(std::move(h));
  }
  return hang;
}

std::optional<Hang> HangWatch::on_sample(HangClock::time_point now, const std::vector<RankSample>& ranks) {
  if (ranks.empty()) return std::nullopt;
  const auto last = record(now, ranks);
  if (reported_at_ && last > *reported_at_) reported_at_.reset();  // a rank printed: that hang is over
  if (now - last < timeout_ || signalled_) return std::nullopt;
  for (const auto& r : ranks) {
    // not watched long enough to tell busy from blocked
    if (seconds(now - seen_[r.pid].cpu.front().first) < 0.9 * seconds(window_)) return std::nullopt;
  }
  Hang hang = snapshot(now, last, ranks);
  if (std::all_of(hang.ranks.begin(), hang.ranks.end(), [](const HungRank& r) { return r.busy; })) {
    reported_at_.reset();  // computing quietly: progress, not a hang
    return std::nullopt;
  }
  if (reported_at_) return std::nullopt;
  reported_at_ = last;
  return hang;
}

std::optional<Hang> HangWatch::on_signal(HangClock::time_point now, const std::vector<RankSample>& ranks,
                                         std::string cause) {
  if (ranks.empty() || signalled_) return std::nullopt;
  signalled_ = true;
  Hang hang = snapshot(now, record(now, ranks), ranks);
  hang.cause = std::move(cause);
  return hang;
}

std::string classify(const std::vector<std::string>& stack) {
  for (const auto& frame : main_thread(stack)) {
    // "function (file:line)" from py-spy, a bare function from eu-stack. Only the functions of native
    // code and the files of torch's own Python code count: a script of the user's may be named
    // nccl_test.py.
    std::string lower = frame;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const auto open = lower.rfind(" (");
    const std::string function = lower.substr(0, open);
    const std::string file = open == std::string::npos ? "" : lower.substr(open + 2);
    const bool python = contains(file, ".py:");
    const bool torch_distributed = python && contains(file, "torch/distributed/");
    // NCCL's collectives are asynchronous: a rank waiting for one waits in a CUDA synchronisation
    // (.item(), .cpu(), torch.cuda.synchronize()), spinning on a CPU.
    if (!python && (contains(function, "streamsynchronize") || contains(function, "devicesynchronize") ||
                    contains(function, "ctxsynchronize") || contains(function, "eventsynchronize") ||
                    contains(function, "_local_scalar_dense_cuda"))) {
      return kGpu;
    }
    if ((torch_distributed && (contains(function, "store") || contains(file, "store"))) ||
        (!python && contains(function, "c10d::") && contains(function, "store"))) {
      return kStore;
    }
    if ((python && (contains(file, "torch/distributed/distributed_c10d.py") ||
                    contains(file, "torch/nn/parallel/distributed.py"))) ||
        (!python &&
         (contains(function, "gloo::") || contains(function, "nccl") || contains(function, "processgroup")))) {
      return kCollective;
    }
    if (python && contains(file, "torch/utils/data/")) return "in a data loader";
  }
  return "";
}

std::optional<size_t> find_suspect(Hang& hang) {
  for (auto& r : hang.ranks) {
    r.doing = classify(r.native.empty() ? r.stack : r.native);
    if (r.doing.empty()) r.doing = r.busy ? "running" : r.state == 'D' ? "blocked in the kernel (D)" : "blocked";
  }
  return choose_suspect(hang);
}

std::optional<size_t> choose_suspect(const Hang& hang) {
  const auto waits = [](const HungRank& r) { return r.doing == kCollective || r.doing == kStore || r.doing == kGpu; };
  for (bool busy : {true, false}) {
    for (size_t i = 0; i < hang.ranks.size(); ++i) {
      const auto& r = hang.ranks[i];
      // Without its stack an idle rank may be waiting like the others: it is no suspect.
      if (r.busy == busy && !waits(r) && (busy || !r.stack.empty())) return i;
    }
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> parse_py_spy(const std::string& json) {
  YAML::Node threads;
  try {
    threads = YAML::Load(json);
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  if (!threads.IsSequence()) return std::nullopt;
  std::vector<std::string> out;
  try {
    for (const auto& t : threads) {
      if (!out.empty()) out.emplace_back();
      // By name, not id: ranks with the same stack then print as one block.
      const auto name = t["thread_name"];
      out.push_back("thread " + (name && name.IsScalar() ? name.as<std::string>() : std::string("?")));
      for (const auto& f : t["frames"]) {
        const auto file = f["short_filename"] && f["short_filename"].IsScalar() ? f["short_filename"] : f["filename"];
        out.push_back(f["name"].as<std::string>("?") + " (" + (file && file.IsScalar() ? file.as<std::string>() : "?") +
                      ":" + f["line"].as<std::string>("?") + ")");
      }
    }
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  return out;
}

namespace {

/// A Python file as py-spy shortens it: what follows site-packages/ or pythonX.Y/, else its name.
std::string short_python_file(const std::string& path) {
  for (const char* root : {"/site-packages/", "/dist-packages/"}) {
    if (auto at = path.rfind(root); at != std::string::npos) return path.substr(at + std::strlen(root));
  }
  if (auto at = path.rfind("/lib/python3"); at != std::string::npos) {
    if (auto slash = path.find('/', at + 12); slash != std::string::npos) return path.substr(slash + 1);
  }
  return path.substr(path.rfind('/') + 1);
}

}  // namespace

std::vector<std::string> parse_faulthandler(const std::string& text) {
  std::vector<std::string> out;
  int threads = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("Thread 0x") || line.starts_with("Current thread 0x")) {
      if (!out.empty()) out.emplace_back();
      out.push_back(line.starts_with("Current") ? "thread MainThread" : "thread " + std::to_string(++threads));
      continue;
    }
    // '  File "/w/hang.py", line 9 in stuck'
    const auto file = line.find("File \"");
    const auto line_at = line.rfind("\", line ");
    const auto in = line.rfind(" in ");
    if (out.empty() || file == std::string::npos || line_at == std::string::npos || in == std::string::npos ||
        in < line_at) {
      continue;
    }
    const std::string path = line.substr(file + 6, line_at - file - 6);
    const std::string number = line.substr(line_at + 8, in - line_at - 8);
    out.push_back(line.substr(in + 4) + " (" + short_python_file(path) + ":" + number + ")");
  }
  return out;
}

std::vector<std::string> parse_eu_stack(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  int threads = 0;
  for (const auto& line : lines) {
    if (line.starts_with("TID ")) {  // numbered in order, not by id, as parse_py_spy names them
      if (!out.empty()) out.emplace_back();
      out.push_back("thread " + std::to_string(++threads));
    } else if (line.starts_with("#")) {
      // "#0  0x00007f0c1b2e5d3a __clock_nanosleep - 1": the function, without the address
      std::istringstream words(line);
      std::string number, address, rest;
      words >> number >> address;
      std::getline(words, rest);
      const auto begin = rest.find_first_not_of(' ');
      out.push_back(begin == std::string::npos ? address : rest.substr(begin));
    }
  }
  return out;
}

std::string stacks_text(const Hang& hang, const std::string& host, const std::string& how) {
  std::string out;
  out += fmt::format("  {:<6} {:<12} {:<8} {:<5} {:>6} {:>8}  {}\n", "rank", "host", "pid", "state", "cpu%", "quiet",
                     "doing");
  for (const auto& r : hang.ranks) {
    out += fmt::format("  {:<6} {:<12} {:<8} {:<5} {:>6.1f} {:>7.0f}s  {}\n", r.rank, r.host.empty() ? host : r.host,
                       r.pid, std::string(1, r.state), r.cpu_percent, r.quiet_s, r.doing);
  }
  // Which tools read the stacks: when more than one, each block says its own.
  std::vector<std::string> tools;
  for (const auto& r : hang.ranks) {
    const std::string& by = r.stack_by.empty() ? how : r.stack_by;
    if (!r.stack.empty() && std::find(tools.begin(), tools.end(), by) == tools.end()) tools.push_back(by);
  }
  // Ranks with the same stack are one block: 64 ranks in all_reduce take one.
  std::vector<std::pair<std::string, std::vector<int>>> blocks;
  for (const auto& r : hang.ranks) {
    std::string text;
    if (tools.size() > 1 && !r.stack.empty()) text = "    (read by " + (r.stack_by.empty() ? how : r.stack_by) + ")\n";
    if (r.stack.empty()) {
      text = "    (no stack: " + (r.stack_error.empty() ? std::string("not read") : r.stack_error) + ")\n";
    }
    for (const auto& line : r.stack) {
      if (line.empty()) continue;
      text += (line.starts_with("thread ") ? "    " : "      ") + line + "\n";
    }
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) { return b.first == text; });
    if (it == blocks.end()) {
      blocks.push_back({text, {r.rank}});
    } else {
      it->second.push_back(r.rank);
    }
  }
  out += "  stacks (" + (tools.empty() ? how : text::join(tools, ", ")) + "):\n";
  for (const auto& [text, ranks] : blocks) {
    out += (ranks.size() == 1 ? "  rank " : "  ranks ") + ranges(ranks) + ":\n" + text;
  }
  return out;
}

std::string hang_report(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                        const std::string& how, double timeout_s) {
  std::vector<int> busy;
  for (const auto& r : hang.ranks) {
    if (r.busy) busy.push_back(r.rank);
  }
  std::string out =
      hang.cause.empty()
          ? fmt::format(
                "dtlaunch: hang: no rank printed for {:.0f} s (--hang_timeout={:g}), and {}\n", hang.quiet_s, timeout_s,
                busy.empty() ? std::string("no rank made progress")
                             : (busy.size() == 1 ? "rank " : "ranks ") + ranges(busy) + " ran while the others waited")
          : "dtlaunch: hang: " + hang.cause + "\n";
  out += stacks_text(hang, host, how);
  if (suspect) {
    const auto& r = hang.ranks[*suspect];
    const auto frames = main_thread(r.stack);
    out += fmt::format("dtlaunch: suspect rank {} on {} (pid {}): {}\n", r.rank, r.host.empty() ? host : r.host, r.pid,
                       frames.empty() ? r.doing : frames.front());
  } else {
    out += "dtlaunch: no suspect on " + host +
           ": every rank here waits in a collective, the store or for the GPU (the rank they wait for may be on "
           "another node)"
           ", or its stack could not be read\n";
  }
  return out;
}

std::string hang_report_json(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                             const std::string& how, double timeout_s) {
  std::string out =
      fmt::format("{{\"hang_timeout_s\": {:g}, \"quiet_s\": {:.1f}, \"cause\": {}, \"host\": {}, \"stacks_by\": {}, ",
                  timeout_s, hang.quiet_s, json_string(hang.cause), json_string(host), json_string(how));
  out +=
      "\"suspect\": " + (suspect ? std::to_string(hang.ranks[*suspect].rank) : std::string("null")) + ", \"ranks\": [";
  for (size_t i = 0; i < hang.ranks.size(); ++i) {
    const auto& r = hang.ranks[i];
    out += fmt::format(
        "{}{{\"rank\": {}, \"host\": {}, \"local_rank\": {}, \"pid\": {}, \"state\": {}, \"cpu_percent\": {:.1f}, "
        "\"quiet_s\": {:.1f}, \"busy\": {}, \"doing\": {}, \"stack_error\": {}, \"stack_by\": {}, \"stack\": [",
        i ? ", " : "", r.rank, json_string(r.host.empty() ? host : r.host), r.local_rank, r.pid,
        json_string(std::string(1, r.state)), r.cpu_percent, r.quiet_s, r.busy ? "true" : "false", json_string(r.doing),
        json_string(r.stack_error), json_string(r.stack_by.empty() ? how : r.stack_by));
    for (size_t j = 0; j < r.stack.size(); ++j) out += (j ? ", " : "") + json_string(r.stack[j]);
    out += "], \"native\": [";
    for (size_t j = 0; j < r.native.size(); ++j) out += (j ? ", " : "") + json_string(r.native[j]);
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace dtl::launcher

namespace dtl::launcher {

namespace {

/// The threads of a stack cut to `frames` frames each (0: all), or to the main thread alone.
std::vector<std::string> trimmed(const std::vector<std::string>& stack, bool main_only, size_t frames) {
  std::vector<std::string> out;
  if (main_only) {
    const auto main = main_thread(stack);
    if (main.empty()) return out;
    out.push_back("thread MainThread");
    for (size_t i = 0; i < main.size() && (frames == 0 || i < frames); ++i) out.push_back(main[i]);
    return out;
  }
  size_t in_thread = 0;
  for (const auto& line : stack) {
    in_thread = line.starts_with("thread ") || line.empty() ? 0 : in_thread + 1;
    if (frames == 0 || in_thread <= frames) out.push_back(line);
  }
  return out;
}

}  // namespace

std::string hang_part(const Hang& hang, const std::string& host, const std::string& how, size_t budget) {
  // Whole stacks if they fit; else the main threads; else fewer frames of them; else none.
  const std::vector<std::pair<bool, size_t>> cuts{{false, 0}, {true, 0}, {true, 20}, {true, 5}, {true, 1}};
  std::string out;
  for (const auto& [main_only, frames] : cuts) {
    Hang cut = hang;
    for (auto& r : cut.ranks) {
      r.stack = trimmed(r.stack, main_only, frames);
      r.native.clear();  // what it says is in `doing`
      if (r.host.empty()) r.host = host;
    }
    out = hang_report_json(cut, std::nullopt, host, how, 0);
    if (out.size() <= budget) return out;
  }
  Hang bare = hang;
  for (auto& r : bare.ranks) {
    r.stack.clear();
    r.native.clear();
    r.stack_error = "cut: too many ranks on this node for one part";
    if (r.host.empty()) r.host = host;
  }
  return hang_report_json(bare, std::nullopt, host, how, 0);
}

std::optional<Hang> parse_hang_part(const std::string& json) {
  try {
    const YAML::Node root = YAML::Load(json);
    if (!root.IsMap() || !root["ranks"] || !root["ranks"].IsSequence()) return std::nullopt;
    Hang hang;
    hang.quiet_s = root["quiet_s"].as<double>(0);
    hang.cause = root["cause"] ? root["cause"].as<std::string>("") : "";
    const std::string host = root["host"].as<std::string>("?");
    for (const auto& n : root["ranks"]) {
      HungRank r;
      r.rank = n["rank"].as<int>();
      r.host = n["host"] ? n["host"].as<std::string>(host) : host;
      r.local_rank = n["local_rank"].as<int>(0);
      r.pid = n["pid"].as<pid_t>(0);
      const std::string state = n["state"].as<std::string>("?");
      r.state = state.empty() ? '?' : state[0];
      r.cpu_percent = n["cpu_percent"].as<double>(0);
      r.quiet_s = n["quiet_s"].as<double>(0);
      r.busy = n["busy"].as<bool>(false);
      r.doing = n["doing"].as<std::string>("");
      r.stack_error = n["stack_error"].as<std::string>("");
      r.stack_by = n["stack_by"].as<std::string>("");
      if (n["stack"] && n["stack"].IsSequence()) {
        for (const auto& line : n["stack"]) r.stack.push_back(line.as<std::string>(""));
      }
      hang.ranks.push_back(std::move(r));
    }
    return hang;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

Hang merge_parts(const std::vector<Hang>& parts) {
  Hang all;
  all.quiet_s = parts.empty() ? 0 : parts.front().quiet_s;
  for (const auto& p : parts) {
    all.quiet_s = std::min(all.quiet_s, p.quiet_s);
    if (all.cause.empty()) all.cause = p.cause;
    all.ranks.insert(all.ranks.end(), p.ranks.begin(), p.ranks.end());
  }
  std::sort(all.ranks.begin(), all.ranks.end(), [](const HungRank& a, const HungRank& b) { return a.rank < b.rank; });
  return all;
}

}  // namespace dtl::launcher
