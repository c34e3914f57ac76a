// accelerate launch's contract with its workers, as a pure function: which of its launchers a run
// would go through, and the variables that launcher adds for the workers (accelerate's
// utils/launch.py: prepare_simple_launcher_cmd_env, prepare_multi_gpu_env, prepare_deepspeed_cmd_env).
// The values are accelerate's to the letter ("True", "false", "NO"): scripts compare them as text.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/command_line.h"
#include "config/launch_options.h"

namespace dtl::config {

/// accelerate launch's three ways of starting the workers on CPUs and CUDA GPUs.
enum class AccelerateLauncher {
  simple,     ///< NO, MULTI_CPU, --cpu: accelerate runs the script itself
  multi_gpu,  ///< MULTI_GPU and FSDP: torchrun's run(), with accelerate's variables patched in
  deepspeed,  ///< DEEPSPEED: torchrun's run() too (one node, or `standard` multinode)
};

/// What the variables depend on beyond the settings.
struct AccelerateHost {
  EnvLookup env;            ///< the environment dtlaunch inherited
  std::string cwd;          ///< DeepSpeed adds it to PYTHONPATH
  int nproc_per_node = 1;   ///< the workers this node starts
  int gpus = 0;             ///< the GPUs visible to the job
  int physical_cores = 1;   ///< psutil.cpu_count(logical=False): CPU runs spread threads over them
};

AccelerateLauncher accelerate_launcher(const LaunchOptions& o, const AccelerateHost& host);

/// The variables accelerate launch gives each worker beyond torchrun's contract (CUDA_VISIBLE_DEVICES
/// is the plan's, per worker), then the config file's `env:` entries. Only for o.accelerate.launch.
std::vector<std::pair<std::string, std::string>> accelerate_variables(const LaunchOptions& o,
                                                                      const AccelerateHost& host);

/// accelerate's str_to_bool(word), as str() of its result ("True", "False"); "" for a word it refuses.
std::string python_bool_word(const std::string& word);

/// Python's str() of a float as accelerate's `type=float` flags hold it: "1.0", "0.5", "1e-05".
std::string python_float(double v);

}  // namespace dtl::config
