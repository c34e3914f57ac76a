// `dtlaunch stacks [PID]`: every rank's stack of a running job of this user on this machine, now,
// from the job's own dtlaunch (watch/job_ask.h); the job goes on undisturbed.
#include <iostream>

#include "base/printable.h"
#include "base/text.h"
#include "commands/commands.h"
#include "watch/job_ask.h"

namespace dtl::commands {

int run_stacks(const std::vector<std::string>& args, const EnvLookup&) {
  if (args.size() > 1 || (args.size() == 1 && (args[0] == "-h" || args[0] == "--help"))) {
    std::cout << "usage: dtlaunch stacks [PID]\n"
                 "Prints every rank's stack of the dtlaunch job of yours running on this machine (PID: its\n"
                 "dtlaunch's, when several run). The job goes on undisturbed.\n";
    return args.size() == 1 ? 0 : 2;
  }
  std::optional<pid_t> pid;
  if (!args.empty()) {
    auto n = text::to_long(args[0]);
    if (!n || *n <= 0) {
      std::cerr << error_line(Error{"expected the pid of a dtlaunch, got " + printable(args[0], 40)}, "dtlaunch stacks");
      return 2;
    }
    pid = static_cast<pid_t>(*n);
  }
  return watch::print_stacks(pid);
}

}  // namespace dtl::commands
