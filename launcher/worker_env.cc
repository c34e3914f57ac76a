#include "launcher/worker_env.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace dtl::launcher {
namespace {

bool has(const EnvPairs& pairs, std::string_view name) {
  for (const auto& [k, v] : pairs) {
    if (k == name) return true;
  }
  return false;
}

}  // namespace

EnvPairs worker_env(const GroupEnv& g, const WorkerSlot& slot, const EnvLookup& inherited) {
  if (!g.torchrun_contract) {
    EnvPairs env = g.variables;
    if (slot.cuda_visible_devices) env.emplace_back("CUDA_VISIBLE_DEVICES", *slot.cuda_visible_devices);
    return env;
  }
  const int rank = g.base_rank + slot.local_rank;
  EnvPairs env{
      {"LOCAL_RANK", std::to_string(g.virtual_local_rank ? 0 : slot.local_rank)},
      {"RANK", std::to_string(rank)},
      {"GROUP_RANK", std::to_string(g.group_rank)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_NAME", g.role},
      {"LOCAL_WORLD_SIZE", std::to_string(g.local_world_size)},
      {"WORLD_SIZE", std::to_string(g.world_size)},
      {"GROUP_WORLD_SIZE", std::to_string(g.group_world_size)},
      {"ROLE_WORLD_SIZE", std::to_string(g.world_size)},
      {"MASTER_ADDR", g.master_addr},
      {"MASTER_PORT", std::to_string(g.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(g.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(g.max_restarts)},
      {"TORCHELASTIC_RUN_ID", g.run_id},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", g.signals_to_handle},
      {"TORCHELASTIC_USE_AGENT_STORE", g.agent_store ? "True" : "False"},
      {"TORCHELASTIC_ERROR_FILE", slot.error_file},
  };
  auto is_set = [&](const std::string& name) { return has(g.variables, name) || inherited(name).has_value(); };
  if (g.deepspeed_variables) {
    env.emplace_back("CROSS_RANK", std::to_string(g.group_rank));
    env.emplace_back("CROSS_SIZE", std::to_string(g.group_world_size));
    env.emplace_back("LOCAL_SIZE", std::to_string(g.local_world_size));
    // deepspeed's launch.py imports deepspeed, whose __init__ setdefault()s this for its workers.
    if (!is_set("PYTORCH_NVML_BASED_CUDA_CHECK")) env.emplace_back("PYTORCH_NVML_BASED_CUDA_CHECK", "1");
  }
  if (!is_set("TORCH_NCCL_ASYNC_ERROR_HANDLING")) env.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!is_set("OMP_NUM_THREADS")) env.emplace_back("OMP_NUM_THREADS", "1");
  if (slot.cuda_visible_devices) env.emplace_back("CUDA_VISIBLE_DEVICES", *slot.cuda_visible_devices);
  EnvPairs out;
  for (const auto& kv : g.variables) {
    if (!has(env, kv.first)) out.push_back(kv);
  }
  out.insert(out.end(), env.begin(), env.end());
  return out;
}

std::vector<std::string> merge_environ(char* const* inherited, const EnvPairs& overlay,
                                       const std::vector<std::string>& withheld) {
  std::vector<std::string> out;
  for (char* const* e = inherited; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    std::string_view key(*e, static_cast<size_t>(eq - *e));
    if (!has(overlay, key) && std::find(withheld.begin(), withheld.end(), key) == withheld.end()) out.emplace_back(*e);
  }
  for (const auto& [k, v] : overlay) out.push_back(k + "=" + v);
  return out;
}

}  // namespace dtl::launcher
