#include <catch2/catch.hpp>

#include <deque>

#include "config/command_line.h"
#include "config/wizard.h"

using namespace dtl::config;

namespace {

/// Answers from a script; records everything the wizard showed, and each answer after its prompt.
struct ScriptedTerminal : Terminal {
  std::deque<Reply> replies;
  std::string transcript;

  explicit ScriptedTerminal(std::vector<std::string> answers) {
    for (auto& a : answers) replies.push_back({Reply::Kind::answer, std::move(a)});
  }
  void write(const std::string& text) override { transcript += text; }
  Reply ask(const std::string& prompt) override {
    transcript += prompt;
    return next();
  }
  Reply choose(const std::string& question, const std::vector<Choice>& options, int initial) override {
    transcript += question + " <";
    for (size_t i = 0; i < options.size(); ++i) transcript += (i ? "/" : "") + options[i].name;
    transcript += "> [" + options[initial].name + "]: ";
    return next();
  }
  Reply next() {
    if (replies.empty()) {
      transcript += "<EOF>\n";
      return {Reply::Kind::eof, ""};
    }
    Reply r = replies.front();
    replies.pop_front();
    transcript += (r.kind == Reply::Kind::interrupt ? "^C" : r.text) + "\n";
    return r;
  }
};

const MachineFacts kFourGpus{4, "fake", "node0"};
const MachineFacts kNoGpu{0, "none", "node0"};

WizardAnswers answered(ScriptedTerminal& term, const MachineFacts& machine) {
  auto r = run_wizard(term, machine);
  INFO(term.transcript);
  REQUIRE(r.answers);
  CHECK(term.replies.empty());
  return *r.answers;
}

/// The written file, parsed back the way a launch reads it.
LaunchOptions loaded(const WizardAnswers& a) {
  const std::string text = render_config(a, "test");
  auto r = parse_command_line({"--config_file", "w.yaml", "--print_config"},
                              [](const std::string&) { return std::optional<std::string>(); },
                              [&](const std::string&) { return FileRead{FileRead::Status::ok, text}; });
  INFO(text << (r ? "" : r.error().message));
  REQUIRE(r);
  REQUIRE(r->shown);
  return *r->shown;
}

}  // namespace

TEST_CASE("a CPU machine: every question answered, and the file loads back to the answers") {
  ScriptedTerminal term({"cpu", "1", "0", "3", "bf16", "2", "/tmp/logs"});
  auto a = answered(term, kNoGpu);
  CHECK(a.machine == WizardAnswers::Machine::cpu);
  CHECK(term.transcript ==
        "Found no GPU on this machine.\n"
        "Which kind of machine is this? <cpu/gpu/multi-gpu> [cpu]: cpu\n"
        "How many machines will run the job? [1]: 1\n"
        "Which port should the workers' rank 0 listen on (0 picks a free one)? [29500]: 0\n"
        "How many processes per machine? [1]: 3\n"
        "Which mixed precision should the workers use (ACCELERATE_MIXED_PRECISION)? <no/fp16/bf16/fp8> [no]: bf16\n"
        "How many times should a failed worker group be restarted? [0]: 2\n"
        "Where should the per-rank log files go (a directory)? [a temporary directory]: /tmp/logs\n");
  CHECK(render_config(a, "dtlaunch config") ==
        "# dtlaunch configuration, written by `dtlaunch config`: CPU only, 1 machine.\n"
        "# Keys are dtlaunch's flags; a flag or a PET_* variable given at launch wins over this file.\n"
        "use_cpu: true\n"
        "nproc_per_node: 3\n"
        "nnodes: 1\n"
        "master_port: 0\n"
        "mixed_precision: bf16\n"
        "max_restarts: 2\n"
        "log_dir: /tmp/logs\n"
        "tee: 3\n");
  auto o = loaded(a);
  CHECK(o.use_cpu);
  CHECK(o.nproc_per_node.count == 3);
  CHECK(o.master_port == 0);
  CHECK(o.mixed_precision == "bf16");
  CHECK(o.max_restarts == 2);
  CHECK(o.log_dir == "/tmp/logs");
  CHECK(o.tee.all == Streams::both);
}

TEST_CASE("one GPU: one process, the GPU asked for by index, Enter takes every default") {
  ScriptedTerminal term({"2", "", "", "1", "", "", ""});
  auto a = answered(term, kFourGpus);
  CHECK(a.machine == WizardAnswers::Machine::gpu);
  CHECK(term.transcript.find("Which kind of machine is this? <cpu/gpu/multi-gpu> [multi-gpu]: 2\n") != std::string::npos);
  CHECK(term.transcript.find("How many processes") == std::string::npos);
  auto o = loaded(a);
  CHECK(o.nproc_per_node.count == 1);
  CHECK(o.gpu_ids == std::vector<int>{1});
  CHECK(o.master_port == 29500);
  CHECK(o.mixed_precision == "no");
  CHECK_FALSE(o.use_cpu);
  CHECK(o.log_dir.empty());
}

TEST_CASE("several GPUs: the detected count is offered, and the GPUs are checked against it") {
  ScriptedTerminal term({"", "", "", "", "", "fp16", "0", ""});
  auto a = answered(term, kFourGpus);
  CHECK(term.transcript.find("How many processes (one per GPU) per machine? [4]: \n") != std::string::npos);
  auto o = loaded(a);
  CHECK(o.nproc_per_node.count == 4);
  CHECK_FALSE(o.gpu_ids);
  CHECK(o.mixed_precision == "fp16");
}

TEST_CASE("invalid answers are asked again, with the reason") {
  ScriptedTerminal term({"quantum", "multi", "0", "two", "1", "70000", "29400", "1", "9", "2", "0,7", "0,0", "1,3",
                         "fp32", "fp8", "-1", "0", ""});
  auto a = answered(term, kFourGpus);
  const std::string& t = term.transcript;
  CHECK(t.find("  expected a number 1-3 or one of cpu, gpu, multi-gpu, got 'quantum'; please answer again\n") !=
        std::string::npos);
  CHECK(t.find("  expected a whole number >= 1, got '0'; please answer again\n") != std::string::npos);
  CHECK(t.find("  expected a whole number >= 1, got 'two'; please answer again\n") != std::string::npos);
  CHECK(t.find("  expected a port from 0 to 65535, got '70000'; please answer again\n") != std::string::npos);
  CHECK(t.find("  several GPUs need at least 2 processes (for a single one, the machine type is gpu); please answer "
               "again\n") != std::string::npos);
  CHECK(t.find("  this machine has 4 GPUs, and two processes cannot share one (NCCL); please answer again\n") !=
        std::string::npos);
  CHECK(t.find("  GPU 7 is not on this machine (4 GPUs: 0 to 3); please answer again\n") != std::string::npos);
  CHECK(t.find("  GPU 0 is listed twice, got '0,0'; please answer again\n") != std::string::npos);
  CHECK(t.find("  expected a number 1-4 or one of no, fp16, bf16, fp8, got 'fp32'; please answer again\n") !=
        std::string::npos);
  CHECK(t.find("  expected a whole number >= 0, got '-1'; please answer again\n") != std::string::npos);
  auto o = loaded(a);
  CHECK(o.nproc_per_node.count == 2);
  CHECK(o.gpu_ids == std::vector<int>{1, 3});
  CHECK(o.master_port == 29400);
  CHECK(o.mixed_precision == "fp8");
}

TEST_CASE("fewer GPUs listed than processes is asked again") {
  ScriptedTerminal term({"multi-gpu", "1", "", "3", "0,1", "0,1,2", "", "", ""});
  answered(term, kFourGpus);
  CHECK(term.transcript.find("  3 processes need 3 GPUs, got 2; please answer again\n") != std::string::npos);
}

TEST_CASE("several machines on one network: rank, address and port become master_addr and master_port") {
  ScriptedTerminal term({"multi-gpu", "2", "2", "1", "", "10.0.0.1", "29600", "yes", "4", "", "bf16", "", ""});
  auto a = answered(term, kFourGpus);
  const std::string& t = term.transcript;
  CHECK(t.find("What is the rank of this machine (0 to 1)? [0]: 2\n"
               "  expected a rank from 0 to 1, got '2'; please answer again\n") != std::string::npos);
  CHECK(t.find("What is the address (IP or host name) of the machine with rank 0? \n"
               "  an address is needed; please answer again\n") != std::string::npos);
  auto o = loaded(a);
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.master_port == 29600);
  CHECK(o.nproc_per_node.count == 4);
}

TEST_CASE("machine 0 is offered its own host name, and other networks get a rendezvous endpoint") {
  ScriptedTerminal term({"cpu", "3", "0", "", "", "no", "c10d", "2", "", "", ""});
  auto a = answered(term, kNoGpu);
  CHECK(term.transcript.find("of the machine with rank 0? [node0]: \n") != std::string::npos);
  auto o = loaded(a);
  CHECK(o.rdzv_backend == "c10d");
  CHECK(o.rdzv_endpoint == "node0:29500");
  CHECK(o.min_nodes == 3);
  CHECK(o.node_rank == 0);
  CHECK(o.use_cpu);
}

TEST_CASE("the address is asked again when it carries a port, and an IPv6 endpoint gets brackets") {
  ScriptedTerminal term({"cpu", "2", "1", "10.0.0.1:29600", "fd00::1", "29600", "no", "c10d", "2", "", "", ""});
  auto a = answered(term, kNoGpu);
  CHECK(term.transcript.find("of the machine with rank 0? 10.0.0.1:29600\n"
                             "  expected the address alone (the port is the next question), got '10.0.0.1:29600'; "
                             "please answer again\n") != std::string::npos);
  auto o = loaded(a);
  CHECK(o.rdzv_endpoint == "[fd00::1]:29600");
}

TEST_CASE("the end of input or Ctrl-C stops the wizard with no answers") {
  ScriptedTerminal eof({"cpu", "1"});
  auto r = run_wizard(eof, kNoGpu);
  CHECK_FALSE(r.answers);
  CHECK(r.exit_code == 1);
  ScriptedTerminal ctrl_c({"multi-gpu"});
  ctrl_c.replies.push_back({Reply::Kind::interrupt, ""});
  r = run_wizard(ctrl_c, kFourGpus);
  CHECK_FALSE(r.answers);
  CHECK(r.exit_code == 130);
  int aborted = 0;
  ScriptedTerminal none({});
  CHECK_FALSE(confirm(none, "Overwrite?", false, aborted));
  CHECK(aborted == 1);
  ScriptedTerminal no({""});
  CHECK(confirm(no, "Overwrite?", false, aborted) == false);
  ScriptedTerminal yes({"y"});
  CHECK(confirm(yes, "Overwrite?", false, aborted) == true);
}

TEST_CASE("menu replies: a number, a name, a unique start of one, a description, or Enter for the default") {
  std::vector<Choice> kinds{{"cpu", "CPU only"}, {"gpu", "one GPU"}, {"multi-gpu", "several GPUs"}};
  CHECK(pick_choice(kinds, "", 2) == 2);
  CHECK(pick_choice(kinds, " 1 ", 2) == 0);
  CHECK(pick_choice(kinds, "Multi_GPU", 0) == 2);
  CHECK(pick_choice(kinds, "mu", 0) == 2);
  CHECK(pick_choice(kinds, "one gpu", 0) == 1);
  CHECK_FALSE(pick_choice(kinds, "4", 0));
  CHECK_FALSE(pick_choice(kinds, "0", 0));
  CHECK_FALSE(pick_choice(kinds, "tpu", 0));
}

TEST_CASE("config default writes the detected GPUs without questions") {
  auto none = loaded(default_answers(kNoGpu));
  CHECK(none.use_cpu);
  CHECK(none.nproc_per_node.count == 1);
  auto one = loaded(default_answers({1, "nvml", "h"}));
  CHECK_FALSE(one.use_cpu);
  CHECK(one.nproc_per_node.count == 1);
  auto four = loaded(default_answers(kFourGpus));
  CHECK(four.nproc_per_node.count == 4);
  CHECK(four.mixed_precision == "no");
  CHECK(render_config(default_answers(kFourGpus), "dtlaunch config default") ==
        "# dtlaunch configuration, written by `dtlaunch config default`: several GPUs, 1 machine.\n"
        "# Keys are dtlaunch's flags; a flag or a PET_* variable given at launch wins over this file.\n"
        "nproc_per_node: 4\n"
        "nnodes: 1\n"
        "master_port: 29500\n"
        "mixed_precision: 'no'\n"
        "max_restarts: 0\n");
}

TEST_CASE("a number with a NUL byte or anything after it is asked again, not taken and then thrown on") {
  // The answer "\0": strtol stopped at the NUL and accepted it, then std::stol threw (exit 134).
  ScriptedTerminal term({"cpu", "", std::string(1, '\0'), std::string("5\0x", 3), "99999999999999999999", " +7 ",
                         "1", "bf16", "0", "/tmp/l"});
  auto a = answered(term, kNoGpu);
  CHECK(a.main_port == 7);
  const std::string& t = term.transcript;
  CHECK(t.find("  expected plain text, got '\\x00'; please answer again\n") != std::string::npos);
  CHECK(t.find("  expected plain text, got '5\\x00x'; please answer again\n") != std::string::npos);
  CHECK(t.find("  expected a port from 0 to 65535, got '99999999999999999999'; please answer again\n") !=
        std::string::npos);
}

TEST_CASE("answers with control characters are echoed escaped and asked again") {
  ScriptedTerminal term({"\x1b[2Jcpu", "cpu", "1", "0", "1", "no", "0", "/tmp/a\nb", "/tmp/ok"});
  auto a = answered(term, kNoGpu);
  CHECK(a.log_dir == "/tmp/ok");
  CHECK(term.transcript.find("got '\\x1b[2Jcpu'; please answer again\n") != std::string::npos);
  CHECK(term.transcript.find("  expected plain text, got '/tmp/a\\nb'; please answer again\n") != std::string::npos);
}

TEST_CASE("no answer throws out of the wizard, whatever bytes the answers are made of") {
  const std::vector<std::string> pieces = {"", "0", "1", "2", "-1", "+", "+-1", "65536", "4096", "9223372036854775808",
                                           "gpu", "cpu", "all", "0,1", "0,,1", ",", ":", "[::1]", "a:b", "host",
                                           std::string(1, '\0'), "\xff", "\x1b[A", "\n", " ", "multi-gpu", "c10d",
                                           "no", "1e3", "0x10", "3", "1,3"};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  for (int run = 0; run < 500; ++run) {
    std::vector<std::string> answers;
    for (int i = 0; i < 40; ++i) answers.push_back(pieces[next() % pieces.size()] + pieces[next() % pieces.size()]);
    ScriptedTerminal term(answers);
    const MachineFacts machine{static_cast<int>(next() % 5), "fake", "node0"};
    WizardResult r;
    REQUIRE_NOTHROW(r = run_wizard(term, machine));
    if (r.answers) {
      INFO(term.transcript);
      loaded(*r.answers);  // whatever was accepted loads back
    }
  }
}
