#include "config/pod_variables.h"

#include <string>
#include <utility>
#include <vector>

#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {

Status check_pod_variables(const EnvLookup& env, const LaunchOptions& o) {
  const auto given = [&](Setting s) { return o.source(s).kind != Source::Kind::default_; };
  if (given(Setting::standalone) && !o.standalone && o.source(Setting::standalone).kind == Source::Kind::env) {
    const std::string& var = o.source(Setting::standalone).where;
    if (env(var).value_or("x").empty()) {
      return fail(var + " is set but empty (a PyTorchJob's elasticPolicy.standalone: true, on which torchrun "
                        "fails too): set it to 1 or 0, or pass --standalone");
    }
  }
  const auto world_size = env("WORLD_SIZE"), rank = env("RANK");
  if (!world_size || !rank || !env("MASTER_ADDR") || !env("MASTER_PORT") || o.standalone) return {};
  // A launcher's worker (dtlaunch's or torchrun's: TORCHELASTIC_RUN_ID) starting a launch of its own:
  // there WORLD_SIZE and RANK count processes, and no pod is in question.
  if (env("TORCHELASTIC_RUN_ID")) return {};
  const bool single_node = given(Setting::nnodes) && o.max_nodes == 1;
  if (single_node) return {};
  // What each missing setting is, in that pod: one node per pod.
  const std::vector<std::pair<Setting, const char*>> stands_for = {{Setting::nnodes, "WORLD_SIZE"},
                                                                     {Setting::node_rank, "RANK"},
                                                                     {Setting::master_addr, "MASTER_ADDR"},
                                                                     {Setting::master_port, "MASTER_PORT"}};
  std::vector<std::string> missing, pass;
  for (const auto& [setting, var] : stands_for) {
    const bool needed = o.rdzv_backend == "static" || setting == Setting::nnodes;
    if (!needed || given(setting)) continue;
    missing.push_back(setting_name(setting));
    pass.push_back("--" + setting_name(setting) + "=$" + var);
  }
  if (missing.empty()) return {};
  return fail("WORLD_SIZE=" + printable(*world_size) + ", RANK=" + printable(*rank) +
              ", MASTER_ADDR and MASTER_PORT are set (a PyTorchJob pod without PET_NNODES and PET_NODE_RANK, "
              "where they count pods, not processes) but not " + text::join(missing, ", ") +
              ": dtlaunch does not guess; pass " + text::join(pass, " ") +
              " (in a manifest's args, $(WORLD_SIZE)...; see docs/kubernetes.md)");
}

}  // namespace dtl::config
