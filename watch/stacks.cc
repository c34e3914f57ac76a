#include "watch/stacks.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace dtl::watch {

namespace {

constexpr const char* kCollective = "in a collective";
constexpr const char* kStore = "in the store";
constexpr const char* kGpu = "waiting for the GPU";

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

/// What waiting for other ranks looks like, for native frames (a function's name) and Python frames
/// (a file of torch's or DeepSpeed's own: a user's script may be named nccl_test.py), lower case.
/// A rank in one of these waits for the others, and is never the suspect.
struct Wait {
  const char* doing;
  std::vector<const char*> native;
  std::vector<const char*> python;
};

const std::vector<Wait>& waits() {
  static const std::vector<Wait> table{
      // NCCL's collectives are asynchronous: a rank waiting for one waits in a CUDA synchronisation
      // (.item(), .cpu(), torch.cuda.synchronize()), spinning on a CPU.
      {kGpu,
       {"streamsynchronize", "devicesynchronize", "ctxsynchronize", "eventsynchronize", "_local_scalar_dense_cuda"},
       {"torch/cuda/__init__.py:", "torch/cuda/streams.py:"}},
      {kStore,
       {"c10d::tcpstore", "c10d::store::", "c10d::prefixstore", "c10d::filestore", "c10d::hashstore",
        "c10d::detail::tcpclient"},
       {"torch/distributed/rendezvous.py:", "torch/distributed/elastic/rendezvous/",
        "torch/distributed/elastic/utils/store.py:"}},
      // c10d's Work::wait and the process groups' own waits, Gloo's and NCCL's.
      {kCollective,
       {"c10d::work::wait", "c10d::processgroup", "c10d::backend", "c10d::ops::", "c10d::reducer", "gloo::", "nccl"},
       {"torch/distributed/distributed_c10d.py:", "torch/distributed/c10d_logger.py:",
        "torch/nn/parallel/distributed.py:", "torch/distributed/fsdp/", "torch/distributed/_functional_collectives",
        "torch/distributed/algorithms/", "deepspeed/comm/"}},
  };
  return table;
}

}  // namespace

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

std::string classify(const std::vector<std::string>& stack) {
  for (const auto& frame : main_thread(stack)) {
    // "function (file:line)" from py-spy, a bare function from eu-stack, "function (library)" from
    // py-spy's native frames.
    std::string lower = frame;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const auto open = lower.rfind(" (");
    const std::string function = lower.substr(0, open);
    const std::string file = open == std::string::npos ? "" : lower.substr(open + 2);
    const bool python = contains(file, ".py:");
    for (const auto& w : waits()) {
      const auto& parts = python ? w.python : w.native;
      const std::string& where = python ? file : function;
      if (std::any_of(parts.begin(), parts.end(), [&](const char* part) { return contains(where, part); })) {
        return w.doing;
      }
    }
    // torch's store calls from Python, wherever they are made from torch.distributed
    if (python && contains(file, "torch/distributed/") && contains(function, "store")) return kStore;
    if (python && contains(file, "torch/utils/data/")) return "in a data loader";
  }
  return "";
}

bool waits_for_others(const HungRank& r) { return r.doing == kCollective || r.doing == kStore || r.doing == kGpu; }

std::optional<size_t> find_suspect(Hang& hang) {
  for (auto& r : hang.ranks) {
    r.doing = classify(r.stack);
    if (r.doing.empty() && !r.native.empty()) r.doing = classify(r.native);
    if (!r.traceback.empty()) {
      r.doing = (r.doing.empty() ? std::string("alive") : r.doing) + " after its traceback";
    } else if (r.doing.empty()) {
      r.doing = r.state == 'T' || r.state == 't' ? "stopped (T)"
                : r.busy                         ? "running"
                : r.state == 'D'                 ? "blocked in the kernel (D)"
                                                 : "blocked";
    }
  }
  return choose_suspect(hang);
}

std::optional<size_t> choose_suspect(const Hang& hang) {
  const auto& ranks = hang.ranks;
  const auto first = [&](auto&& off) -> std::optional<size_t> {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (off(ranks[i])) return i;
    }
    return std::nullopt;
  };
  // What is known to be off, surest first: a rank that printed its traceback and lives on, one
  // stopped (SIGSTOP, a debugger), one that runs while the others wait.
  if (auto i = first([](const HungRank& r) { return !r.traceback.empty(); })) return i;
  if (auto i = first([](const HungRank& r) { return r.state == 'T' || r.state == 't'; })) return i;
  // A rank whose stack places it outside any wait is off only beside ranks seen waiting: where no
  // rank is, the stacks may just be in waits the table does not know, and naming one would send
  // the user to read a rank that is fine.
  // Nor is a busy rank off where every rank is busy and none is seen waiting: nothing tells them apart.
  const bool some_wait = std::any_of(ranks.begin(), ranks.end(), waits_for_others);
  const bool all_busy = std::all_of(ranks.begin(), ranks.end(), [](const HungRank& r) { return r.busy; });
  if (auto i = first([&](const HungRank& r) {
        return r.busy && !waits_for_others(r) && (!r.stack.empty() || some_wait) && (!all_busy || some_wait);
      })) {
    return i;
  }
  if (some_wait) {
    if (auto i = first([](const HungRank& r) { return !waits_for_others(r) && !r.stack.empty(); })) return i;
  }
  // Where the stacks name no rank (every rank waits in a collective: one calls broadcast, the others
  // all_reduce), the flight recorder's verdict picks one.
  if (auto rank = verdict_suspect(hang.collective)) return first([&](const HungRank& r) { return r.rank == *rank; });
  return std::nullopt;
}

std::vector<std::string> without_hook_thread(const std::vector<std::string>& stack) {
  // py-spy names the hook's function "_dtlaunch_flight_recorder.<locals>.serve", faulthandler "serve"
  const auto hook = [](const std::string& frame) {
    return frame.starts_with("_dtlaunch_flight_recorder.") ||
           (frame.starts_with("serve (") && contains(frame, "sitecustomize.py:"));
  };
  std::vector<std::string> out;
  for (size_t begin = 0; begin < stack.size();) {
    size_t end = begin + 1;
    while (end < stack.size() && !stack[end].starts_with("thread ")) ++end;
    if (!std::any_of(stack.begin() + static_cast<long>(begin), stack.begin() + static_cast<long>(end), hook)) {
      out.insert(out.end(), stack.begin() + static_cast<long>(begin), stack.begin() + static_cast<long>(end));
    }
    begin = end;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();  // the blank line that led to a dropped thread
  return out;
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
  int unnamed = 0;
  try {
    for (const auto& t : threads) {
      if (!out.empty()) out.emplace_back();
      // By name, not id: ranks with the same stack then print as one block. py-spy 0.4 gives the
      // name as `threading` has it, null where that module was never imported; the main thread is
      // the one whose OS thread id is the process's.
      const auto name = t["thread_name"];
      const auto tid = t["os_thread_id"], pid = t["pid"];
      const bool main = tid && pid && tid.IsScalar() && pid.IsScalar() && tid.Scalar() == pid.Scalar();
      out.push_back("thread " + (main                      ? std::string("MainThread")
                                 : name && name.IsScalar() ? name.Scalar()
                                                           : std::to_string(++unnamed)));
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

}  // namespace dtl::watch
