// `dtlaunch config`: the questions accelerate's users know, one at a time with the default shown,
// asked through a Terminal so that the whole flow is tested with scripted answers.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtl::config {

/// What the user typed or picked; end of input and Ctrl-C abort the wizard.
struct Reply {
  enum class Kind { answer, eof, interrupt } kind = Kind::answer;
  std::string text;
};

/// One entry of a menu.
struct Choice {
  std::string name;         ///< what a user types: "multi-gpu"
  std::string description;  ///< "several GPUs"
};

/// The wizard's view of the terminal: the real one has raw-mode arrow menus, the tests' a script.
class Terminal {
 public:
  virtual ~Terminal() = default;
  virtual void write(const std::string& text) = 0;
  /// A line of free text after `prompt` (which already shows the default).
  virtual Reply ask(const std::string& prompt) = 0;
  /// A pick among `options`, `initial` being the default. The reply is an option's name, or what
  /// the user typed (a number or a name, interpreted by pick_choice).
  virtual Reply choose(const std::string& question, const std::vector<Choice>& options, int initial) = 0;
};

/// A menu reply: empty is the default, else a number from 1, a name or a unique start of one (case,
/// `-`, `_` and spaces do not matter), or a description. The index, or std::nullopt.
std::optional<int> pick_choice(const std::vector<Choice>& options, const std::string& reply, int initial);

/// What the file says, in the wizard's terms.
struct WizardAnswers {
  enum class Machine { cpu, gpu, multi_gpu };
  Machine machine = Machine::cpu;
  int num_machines = 1;
  int machine_rank = 0;
  std::string main_address;  ///< machine 0; only with several machines
  int main_port = 29500;
  bool same_network = true;  ///< MASTER_ADDR/PORT; otherwise a rendezvous endpoint
  std::string rdzv_backend = "static";
  std::string nproc = "1";    ///< per machine: a count, or "gpu" (one per visible GPU)
  std::string gpu_ids = "all";
  std::string mixed_precision = "no";
  int max_restarts = 0;
  std::string log_dir;  ///< empty: a temporary directory
};

/// What the wizard knows of this machine.
struct MachineFacts {
  int gpus = 0;
  std::string gpu_source;  ///< "nvml", "nvidia-smi", "fake" or "none"
  std::string hostname;
};

struct WizardResult {
  std::optional<WizardAnswers> answers;
  int exit_code = 0;  ///< when aborted: 130 for Ctrl-C, 1 for the end of input
};

WizardResult run_wizard(Terminal& term, const MachineFacts& machine);

/// A yes/no menu; std::nullopt when aborted (`aborted_code` says how).
std::optional<bool> confirm(Terminal& term, const std::string& question, bool default_yes, int& aborted_code);

/// `dtlaunch config default`: the detected GPUs, no questions.
WizardAnswers default_answers(const MachineFacts& machine);

/// The answers as a dtlaunch config file.
std::string render_config(const WizardAnswers& answers, const std::string& written_by);

}  // namespace dtl::config
