#include "watch/hang_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/printable.h"
#include "base/text.h"
#include "watch/stacks.h"

namespace dtl::watch {

namespace {

using text::json_string;

/// "0-3,5" for ranks 0, 1, 2, 3 and 5.
std::string ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return text::ranges(ranks);
}

/// The end of `text`, where a traceback's exception is, at most `size` bytes.
std::string tail(const std::string& text, size_t size) {
  return text.size() <= size ? text : "...\n" + text.substr(text.size() - size);
}

/// "rank 3", "ranks 0-3,5".
std::string plural(const std::vector<int>& ranks) { return (ranks.size() == 1 ? "rank " : "ranks ") + ranges(ranks); }

/// The threads of a stack cut to `frames` frames each (0: all), or to the main thread alone; a cut
/// stack ends with a line that says what was left out.
std::vector<std::string> trimmed(const std::vector<std::string>& stack, bool main_only, size_t frames) {
  std::vector<std::string> out;
  if (main_only) {
    const auto main = main_thread(stack);
    if (main.empty()) return out;
    out.push_back("thread MainThread");
    for (size_t i = 0; i < main.size() && (frames == 0 || i < frames); ++i) out.push_back(main[i]);
    const size_t threads = std::max<size_t>(
        1, std::count_if(stack.begin(), stack.end(), [](const std::string& l) { return l.starts_with("thread "); }));
    const size_t frames_out = main.size() - (out.size() - 1);
    std::vector<std::string> left;
    if (threads > 1) left.push_back(fmt::format("{} other thread{}", threads - 1, threads > 2 ? "s" : ""));
    if (frames_out > 0) left.push_back(fmt::format("{} more frame{}", frames_out, frames_out > 1 ? "s" : ""));
    if (!left.empty()) out.push_back("(" + text::join(left, " and ") + " left out to fit)");
    return out;
  }
  size_t in_thread = 0;
  for (const auto& line : stack) {
    in_thread = line.starts_with("thread ") || line.empty() ? 0 : in_thread + 1;
    if (frames == 0 || in_thread <= frames) out.push_back(line);
  }
  return out;
}

/// A line of a worker's or a peer's (a thread's, function's or file's name, another node's part),
/// safe for the terminal: no escape sequence, no carriage return that forges a line of dtlaunch's.
std::string shown(const std::string& s, size_t max = 500) { return printable(s, max); }

/// Why no rank is named: every rank waits for another, or none is known to be off.
std::string no_suspect_reason(const Hang& hang) {
  std::vector<int> unread, unplaced;
  for (const auto& r : hang.ranks) {
    if (waits_for_others(r)) continue;
    (r.stack.empty() ? unread : unplaced).push_back(r.rank);
  }
  if (unread.empty() && unplaced.empty()) {
    return "every rank waits for the others (in a collective, the store or for the GPU); the rank they wait for "
           "may be on another node, or gone";
  }
  std::string out = "no rank is known to be off";
  if (!unplaced.empty())
    out += "; " + plural(unplaced) + " blocked where " + (unplaced.size() == 1 ? "its stack does" : "their stacks do") +
           " not say";
  if (!unread.empty()) out += "; " + plural(unread) + " without a stack";
  return out;
}

}  // namespace

std::string silence(double quiet_s) { return fmt::format("no rank printed for {:.0f} s", quiet_s); }

std::string hang_failure(const Hang& hang, const HungRank* suspect) {
  return "hang: " + (hang.cause.empty() ? silence(hang.quiet_s) : shown(hang.cause, 400)) + " (" +
         (suspect ? "suspect: " + shown((waits_for_others(*suspect) || suspect->stack.empty()) &&
                                                !verdict_reason(hang.collective, suspect->rank).empty()
                                            ? verdict_reason(hang.collective, suspect->rank)
                                            : suspect->doing,
                                        200)
                  : std::string("no suspect: the lowest rank stands for the job")) +
         ")";
}

std::string stacks_text(const Hang& hang, const std::string& host, const std::string& how) {
  std::string out;
  out += fmt::format("  {:<6} {:<12} {:<8} {:<5} {:>6} {:>8}  {}\n", "rank", "host", "pid", "state", "cpu%", "quiet",
                     "doing");
  for (const auto& r : hang.ranks) {
    out += fmt::format("  {:<6} {:<12} {:<8} {:<5} {:>6.1f} {:>7.0f}s  {}\n", r.rank,
                       shown(r.host.empty() ? host : r.host, 100), r.pid, shown(std::string(1, r.state)), r.cpu_percent,
                       r.quiet_s, shown(r.doing, 200));
  }
  // Which tools read the stacks: when more than one, each block says its own.
  std::vector<std::string> tools;
  for (const auto& r : hang.ranks) {
    const std::string by = shown(r.stack_by.empty() ? how : r.stack_by, 50);
    if (!r.stack.empty() && std::find(tools.begin(), tools.end(), by) == tools.end()) tools.push_back(by);
  }
  // Ranks with the same stack are one block: 64 ranks in all_reduce take one.
  std::vector<std::pair<std::string, std::vector<int>>> blocks;
  for (const auto& r : hang.ranks) {
    std::string text;
    if (tools.size() > 1 && !r.stack.empty()) {
      text = "    (read by " + shown(r.stack_by.empty() ? how : r.stack_by, 50) + ")\n";
    }
    if (r.stack.empty()) {
      text = "    (no stack: " + (r.stack_error.empty() ? std::string("not read") : shown(r.stack_error)) + ")\n";
    }
    if (r.read_pid) text += "    (read in the Python process under the rank's own)\n";
    for (const auto& line : r.stack) {
      if (line.empty()) continue;
      text += (line.starts_with("thread ") ? "    " : "      ") + shown(line) + "\n";
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
          ? fmt::format("dtlaunch: hang: {} (--hang_timeout={:g}), and {}\n", silence(hang.quiet_s), timeout_s,
                        busy.empty()
                            ? std::string("no rank made progress")
                            : (busy.size() == 1 ? "rank " : "ranks ") + ranges(busy) + " ran while the others waited")
          : "dtlaunch: hang: " + shown(hang.cause) + "\n";
  out += stacks_text(hang, host, how);
  out += verdict_text(hang.collective);
  if (suspect) {
    const auto& r = hang.ranks[*suspect];
    const auto frames = main_thread(r.stack);
    // a rank that waits, or whose stack is missing, is named by the flight recorder's verdict, which says why
    const auto by_record =
        waits_for_others(r) || r.stack.empty() ? verdict_reason(hang.collective, r.rank) : std::string();
    out += fmt::format("dtlaunch: suspect rank {} on {} (pid {}): {}\n", r.rank,
                       shown(r.host.empty() ? host : r.host, 100), r.pid,
                       !by_record.empty() ? shown(by_record) : shown(frames.empty() ? r.doing : frames.front()));
  } else {
    out += "dtlaunch: no suspect: " + no_suspect_reason(hang) + "\n";
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
  const bool with_verdict =
      !hang.collective.ranks.empty() || !hang.collective.no_record.empty() || !hang.collective.error.empty();
  for (size_t i = 0; i < hang.ranks.size(); ++i) {
    const auto& r = hang.ranks[i];
    out += fmt::format(
        "{}{{\"rank\": {}, \"host\": {}, \"local_rank\": {}, \"pid\": {}, \"state\": {}, \"cpu_percent\": {:.1f}, "
        "\"quiet_s\": {:.1f}, \"busy\": {}, \"doing\": {}, \"traceback\": {}, \"stack_error\": {}, "
        "\"stack_by\": {}, \"stack\": [",
        i ? ", " : "", r.rank, json_string(r.host.empty() ? host : r.host), r.local_rank, r.pid,
        json_string(std::string(1, r.state)), r.cpu_percent, r.quiet_s, r.busy ? "true" : "false", json_string(r.doing),
        r.traceback.empty() ? std::string("null") : json_string(r.traceback), json_string(r.stack_error),
        json_string(r.stack_by.empty() ? how : r.stack_by));
    for (size_t j = 0; j < r.stack.size(); ++j) out += (j ? ", " : "") + json_string(r.stack[j]);
    out += "], \"native\": [";
    for (size_t j = 0; j < r.native.size(); ++j) out += (j ? ", " : "") + json_string(r.native[j]);
    out += "]";
    if (!r.record.empty() || !r.record_error.empty()) {
      out += ", \"record\": " + json_string(r.record) + ", \"record_error\": " + json_string(r.record_error);
    }
    out += "}";
  }
  out += "]";
  if (with_verdict) out += ", \"collective\": " + verdict_json(hang.collective);
  return out + "}\n";
}

std::string hang_part(const Hang& hang, const std::string& host, const std::string& how, size_t budget) {
  // Whole stacks if they fit; else the main threads; else fewer frames of them; else none.
  const std::vector<std::pair<bool, size_t>> cuts{{false, 0}, {true, 0}, {true, 20}, {true, 5}, {true, 1}};
  std::string out;
  for (const auto& [main_only, frames] : cuts) {
    Hang cut = hang;
    for (auto& r : cut.ranks) {
      r.stack = trimmed(r.stack, main_only, frames);
      r.native.clear();  // what it says is in `doing`
      if (main_only) r.traceback = tail(r.traceback, 2048);
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
    r.traceback = tail(r.traceback, 256);  // the exception's line still names the suspect
    if (r.host.empty()) r.host = host;
  }
  out = hang_report_json(bare, std::nullopt, host, how, 0);
  if (out.size() <= budget) return out;
  for (auto& r : bare.ranks) {  // the flight recorder's records last
    if (!r.record.empty()) r.record_error = "cut: too many ranks on this node for one part";
    r.record.clear();
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
      if (n["traceback"] && n["traceback"].IsScalar()) r.traceback = n["traceback"].as<std::string>("");
      r.stack_error = n["stack_error"].as<std::string>("");
      r.stack_by = n["stack_by"].as<std::string>("");
      if (n["stack"] && n["stack"].IsSequence()) {
        for (const auto& line : n["stack"]) r.stack.push_back(line.as<std::string>(""));
      }
      if (n["record"]) r.record = n["record"].as<std::string>("");
      if (n["record_error"]) r.record_error = n["record_error"].as<std::string>("");
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

}  // namespace dtl::watch
