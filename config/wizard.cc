#include "config/wizard.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <set>
#include <stdexcept>

#include "config/config_file.h"
#include "config/flags.h"
#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// Ctrl-C or the end of input: unwinds the question flow.
struct Abort {
  int exit_code;
};

std::string norm(const std::string& s) {
  std::string out;
  for (char c : text::lower(text::trim(s))) out += (c == '-' || c == ' ') ? '_' : c;
  return out;
}

/// A whole number in [lo, hi] that is the whole answer (a NUL byte in it too), or nothing.
std::optional<long> whole(const std::string& s, long lo, long hi) {
  auto v = text::to_long(text::trim(s));
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

/// Text that a config file holds and a terminal shows as typed: valid UTF-8, no control characters.
bool plain_text(const std::string& s) {
  return printable(s).size() == s.size() + static_cast<size_t>(std::count(s.begin(), s.end(), '\\'));
}

class Questions {
 public:
  Questions(Terminal& term) : term_(term) {}

  /// Asks until `check` accepts the answer (it returns "" then, else the reason); Enter takes `def`.
  std::string ask(const std::string& question, const std::string& def,
                  const std::function<std::string(const std::string&)>& check, const std::string& shown_default = "") {
    const std::string prompt =
        question + (def.empty() && shown_default.empty() ? " " : " [" + (shown_default.empty() ? def : shown_default) + "]: ");
    while (true) {
      Reply r = term_.ask(prompt);
      if (r.kind == Reply::Kind::interrupt) throw Abort{130};
      if (r.kind == Reply::Kind::eof) throw Abort{1};
      std::string answer = text::trim(r.text);
      if (answer.empty()) answer = def;
      std::string why = plain_text(answer) ? check(answer) : "expected plain text, got '" + printable(answer) + "'";
      if (why.empty()) return answer;
      term_.write("  " + why + "; please answer again\n");
    }
  }

  long number(const std::string& question, long def, long lo, long hi, const std::string& what) {
    const std::string answer = ask(question, std::to_string(def), [&](const std::string& a) -> std::string {
      if (whole(a, lo, hi)) return "";
      return "expected " + what + ", got '" + printable(a) + "'";
    });
    return whole(answer, lo, hi).value_or(def);  // ask returns only what the check accepted
  }

  int choose(const std::string& question, const std::vector<Choice>& options, int initial) {
    while (true) {
      Reply r = term_.choose(question, options, initial);
      if (r.kind == Reply::Kind::interrupt) throw Abort{130};
      if (r.kind == Reply::Kind::eof) throw Abort{1};
      if (auto i = pick_choice(options, r.text, initial)) return *i;
      std::vector<std::string> names;
      for (const auto& o : options) names.push_back(o.name);
      term_.write("  expected a number 1-" + std::to_string(options.size()) + " or one of " + text::join(names, ", ") +
                  ", got '" + printable(text::trim(r.text)) + "'; please answer again\n");
    }
  }

  Terminal& term() { return term_; }

 private:
  Terminal& term_;
};

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

void ask_layout(Questions& q, const MachineFacts& machine, WizardAnswers& a) {
  using Machine = WizardAnswers::Machine;
  a.num_machines = static_cast<int>(q.number("How many machines will run the job?", 1, 1, 65536, "a whole number >= 1"));
  if (a.num_machines > 1) {
    a.machine_rank = static_cast<int>(q.number("What is the rank of this machine (0 to " +
                                                   std::to_string(a.num_machines - 1) + ")?",
                                               0, 0, a.num_machines - 1,
                                               "a rank from 0 to " + std::to_string(a.num_machines - 1)));
    const std::string def = a.machine_rank == 0 ? machine.hostname : "";
    a.main_address = q.ask("What is the address (IP or host name) of the machine with rank 0?", def,
                           [](const std::string& s) -> std::string {
                             if (s.empty()) return "an address is needed";
                             if (s.find_first_of(" \t,") != std::string::npos) return "expected one address, got '" + printable(s) + "'";
                             // One colon is host:port (IPv6 addresses have several): the endpoint would not parse.
                             if (std::count(s.begin(), s.end(), ':') == 1 || s.front() == '[') {
                               return "expected the address alone (the port is the next question), got '" + printable(s) + "'";
                             }
                             return "";
                           });
    a.main_port = static_cast<int>(q.number("Which port does the machine with rank 0 listen on?", 29500, 1, 65535,
                                            "a port from 1 to 65535"));
    a.same_network = q.choose("Are all machines on the same local network?",
                              {{"yes", "workers meet at MASTER_ADDR:MASTER_PORT"},
                               {"no", "machines meet through a rendezvous endpoint"}},
                              0) == 0;
    if (!a.same_network) {
      a.rdzv_backend = q.choose("Which rendezvous backend?",
                                {{"static", "each machine has a fixed rank"},
                                 {"c10d", "machines join in any order and get their rank"}},
                                0) == 0
                           ? "static"
                           : "c10d";
    }
  } else {
    a.main_port = static_cast<int>(q.number("Which port should the workers' rank 0 listen on (0 picks a free one)?",
                                            29500, 0, 65535, "a port from 0 to 65535"));
  }

  if (a.machine == Machine::cpu) {
    a.nproc = q.ask("How many processes per machine?", "1", [](const std::string& s) -> std::string {
      if (s == "cpu" || whole(s, 1, 4096)) return "";
      return "expected a whole number >= 1, or cpu for one per CPU, got '" + printable(s) + "'";
    });
  } else if (a.machine == Machine::multi_gpu) {
    const std::string def = machine.gpus >= 2 ? std::to_string(machine.gpus) : "gpu";
    a.nproc = q.ask("How many processes (one per GPU) per machine?", def, [&](const std::string& s) -> std::string {
      if (s == "gpu") return "";
      auto n = whole(s, 1, 4096);
      if (!n) return "expected a whole number >= 2, or gpu for one per visible GPU, got '" + printable(s) + "'";
      if (*n == 1) return "several GPUs need at least 2 processes (for a single one, the machine type is gpu)";
      if (machine.gpus > 0 && *n > machine.gpus) {
        return "this machine has " + plural(machine.gpus, "GPU") + ", and two processes cannot share one (NCCL)";
      }
      return "";
    });
  } else {
    a.nproc = "1";
  }

  if (a.machine != Machine::cpu) {
    const bool one = a.machine == Machine::gpu;
    a.gpu_ids = q.ask(one ? "Which GPU should the worker use (its index, or all for the first visible)?"
                          : "Which GPUs should be used (comma-separated indices, or all)?",
                      "all", [&](const std::string& s) -> std::string {
                        if (text::lower(s) == "all") return "";
                        std::vector<int> ids;
                        try {
                          ids = parse_gpu_ids(s);
                        } catch (const std::invalid_argument& e) {
                          return std::string(e.what()) + ", got '" + printable(s) + "'";
                        }
                        for (int id : ids) {
                          if (machine.gpus > 0 && id >= machine.gpus) {
                            return "GPU " + std::to_string(id) + " is not on this machine (" +
                                   plural(machine.gpus, "GPU") + ": 0 to " + std::to_string(machine.gpus - 1) + ")";
                          }
                        }
                        if (one && ids.size() != 1) return "one GPU takes one index, got '" + printable(s) + "'";
                        if (auto n = whole(a.nproc, 1, 4096); n && static_cast<size_t>(*n) > ids.size()) {
                          return std::to_string(*n) + " processes need " + std::to_string(*n) + " GPUs, got " +
                                 std::to_string(ids.size());
                        }
                        return "";
                      });
    if (text::lower(a.gpu_ids) == "all") a.gpu_ids = "all";
  }
}

}  // namespace

std::optional<int> pick_choice(const std::vector<Choice>& options, const std::string& reply, int initial) {
  const std::string t = norm(reply);
  if (t.empty()) return initial;
  if (auto n = whole(t, 1, static_cast<long>(options.size()))) return static_cast<int>(*n - 1);
  std::optional<int> prefix;
  int prefixes = 0;
  for (size_t i = 0; i < options.size(); ++i) {
    if (norm(options[i].name) == t || norm(options[i].description) == t) return static_cast<int>(i);
    if (norm(options[i].name).rfind(t, 0) == 0) {
      prefix = static_cast<int>(i);
      ++prefixes;
    }
  }
  if (prefixes == 1) return prefix;
  return std::nullopt;
}

WizardResult run_wizard(Terminal& term, const MachineFacts& machine) {
  using Machine = WizardAnswers::Machine;
  Questions q(term);
  WizardAnswers a;
  try {
    if (machine.gpus > 0) {
      term.write("Found " + plural(machine.gpus, "GPU") + " on this machine (" + machine.gpu_source + ").\n");
    } else {
      term.write("Found no GPU on this machine.\n");
    }
    const int detected = machine.gpus == 0 ? 0 : machine.gpus == 1 ? 1 : 2;
    a.machine = static_cast<Machine>(q.choose("Which kind of machine is this?",
                                              {{"cpu", "CPU only"}, {"gpu", "one GPU"}, {"multi-gpu", "several GPUs"}},
                                              detected));
    ask_layout(q, machine, a);
    a.mixed_precision = std::vector<std::string>{"no", "fp16", "bf16", "fp8"}[q.choose(
        "Which mixed precision should the workers use (ACCELERATE_MIXED_PRECISION)?",
        {{"no", "full precision"}, {"fp16", "half precision"}, {"bf16", "bfloat16"}, {"fp8", "8-bit floats (recent GPUs)"}},
        0)];
    a.max_restarts = static_cast<int>(q.number("How many times should a failed worker group be restarted?", 0, 0,
                                               1000000, "a whole number >= 0"));
    a.log_dir = q.ask("Where should the per-rank log files go (a directory)?", "",
                      [](const std::string&) { return std::string(); }, "a temporary directory");
  } catch (const Abort& abort) {
    return {std::nullopt, abort.exit_code};
  }
  return {a, 0};
}

std::optional<bool> confirm(Terminal& term, const std::string& question, bool default_yes, int& aborted_code) {
  Questions q(term);
  try {
    return q.choose(question, {{"yes", "yes"}, {"no", "no"}}, default_yes ? 0 : 1) == 0;
  } catch (const Abort& abort) {
    aborted_code = abort.exit_code;
    return std::nullopt;
  }
}

WizardAnswers default_answers(const MachineFacts& machine) {
  WizardAnswers a;
  if (machine.gpus == 0) {
    a.machine = WizardAnswers::Machine::cpu;
  } else if (machine.gpus == 1) {
    a.machine = WizardAnswers::Machine::gpu;
  } else {
    a.machine = WizardAnswers::Machine::multi_gpu;
    a.nproc = std::to_string(machine.gpus);
  }
  return a;
}

std::string render_config(const WizardAnswers& a, const std::string& written_by) {
  using Machine = WizardAnswers::Machine;
  const char* kinds[] = {"CPU only", "one GPU", "several GPUs"};
  std::string out = "# dtlaunch configuration, written by `" + written_by + "`: " + kinds[static_cast<int>(a.machine)] +
                    ", " + plural(a.num_machines, "machine") + ".\n" +
                    "# Keys are dtlaunch's flags; a flag or a PET_* variable given at launch wins over this file.\n";
  auto line = [&](Setting key, const std::string& value) {
    out += std::string(flag(key).name) + ": " + yaml_scalar(value) + "\n";
  };
  if (a.machine == Machine::cpu) out += std::string(flag(Setting::use_cpu).name) + ": true\n";
  line(Setting::nproc_per_node, a.nproc);
  if (a.machine != Machine::cpu && a.gpu_ids != "all") line(Setting::gpu_ids, a.gpu_ids);
  line(Setting::nnodes, std::to_string(a.num_machines));
  if (a.num_machines > 1) {
    line(Setting::node_rank, std::to_string(a.machine_rank));
    if (a.same_network) {
      line(Setting::master_addr, a.main_address);
      line(Setting::master_port, std::to_string(a.main_port));
    } else {
      line(Setting::rdzv_backend, a.rdzv_backend);
      const bool ipv6 = a.main_address.find(':') != std::string::npos;  // host:port needs [fd00::1]:port
      line(Setting::rdzv_endpoint, (ipv6 ? "[" + a.main_address + "]" : a.main_address) + ":" + std::to_string(a.main_port));
    }
  } else {
    line(Setting::master_port, std::to_string(a.main_port));
  }
  line(Setting::mixed_precision, a.mixed_precision);
  line(Setting::max_restarts, std::to_string(a.max_restarts));
  if (!a.log_dir.empty()) {
    line(Setting::log_dir, a.log_dir);
    line(Setting::tee, "3");  // the answer asked for log files: each rank's stdout and stderr, and the console too
  }
  return out;
}

}  // namespace dtl::config
