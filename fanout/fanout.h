// Many nodes from one command: the launching dtlaunch starts one agent per host over OpenSSH's
// client (`ssh -o BatchMode=yes host 'cd DIR && exec dtlaunch fanout-node ARGS'`, all at once) and
// relays their output as whole lines, each with its host in front.
//   - fanout/fanout_plan.h: every host's command line and variables;
//   - fanout/fanout_wire.h: what goes over each ssh channel;
//   - fanout/fanout_state.h: the rules (preflight, stop, exit code) as a pure machine;
//   - here: the processes, pipes, signals and timers that feed it.
#pragma once

#include "base/error.h"
#include "fanout/fanout_plan.h"

namespace dtl::launcher {
class Console;
}

namespace dtl::fanout {

/// About the most descriptors a fan-out over `hosts` hosts holds at once: a pipe end for each
/// host's stdin, stdout and stderr, and a margin for the event loop, the console and a starting ssh.
uint64_t fanout_descriptors(size_t hosts);

/// Before anything starts: the descriptors `plan` needs fit in this process's limit (raised to the
/// hard one), else an Error (exit 2) naming `ulimit -n`.
Status check_fanout_limits(const FanoutPlan& plan);

/// Runs the plan: starts every host's agent, each ssh in a process group of its own, relays their
/// output to `console`, stops them all on SIGINT, SIGTERM or SIGHUP, passes SIGUSR1 and SIGUSR2 on,
/// and returns the job's exit code (the root cause's, as the first host's agent reports it), or a
/// preflight failure's after printing it.
int run_fanout(const FanoutPlan& plan, launcher::Console& console);

}  // namespace dtl::fanout
