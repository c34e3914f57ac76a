// `dtlaunch env`: what a bug report needs, as a Markdown list to paste: versions, machine, GPUs,
// NCCL, Python and torch, and the settings in effect with their sources.
#include <sys/utsname.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/posix.h"
#include "commands/commands.h"
#include "base/text.h"
#include "node/gpus.h"
#include "watch/stack_reader.h"

namespace dtl::commands {
namespace {

/// The value of `key` in a "key: value" or KEY=value file such as /proc/meminfo or /etc/os-release.
std::string field(const std::string& path, const std::string& key, char sep) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find(sep);
    if (pos == std::string::npos || text::trim(line.substr(0, pos)) != key) continue;
    std::string v = text::trim(line.substr(pos + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return v;
  }
  return "";
}

std::string gib(unsigned long long bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string kib_as_gib(const std::string& meminfo_value) {
  return meminfo_value.empty() ? "?" : gib(std::stoull(meminfo_value) * 1024);
}

/// NCCL's own version, from libnccl.so.2 when the loader finds it.
std::string nccl_version() {
  posix::Library lib("libnccl.so.2");
  if (!lib) return "not found (libnccl.so.2)";
  auto fn = lib.function<int(int*)>("ncclGetVersion");
  int code = 0;
  if (!fn || fn(&code) != 0) return "libnccl.so.2 without ncclGetVersion";
  // 2.9 and later: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch.
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

/// Lines printed by `python -c`, or empty when there is no such interpreter.
std::vector<std::string> python_facts(const std::string& python) {
  const char* script =
      "import platform, sys\n"
      "print(platform.python_version()); print(sys.executable)\n"
      "try:\n"
      "    import torch\n"
      "    print(torch.__version__); print(torch.version.cuda or 'none'); print(torch.cuda.is_available())\n"
      "    try:\n"
      "        print('.'.join(map(str, torch.cuda.nccl.version())))\n"
      "    except Exception:\n"
      "        print('none')\n"
      "except Exception as e:\n"
      "    print('-'); print(type(e).__name__)\n";
  return posix::run_program({python, "-c", script}, std::chrono::seconds(60)).lines;
}

}  // namespace

int run_env(const std::vector<std::string>& args, const EnvLookup& env) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << "usage: dtlaunch env [dtlaunch flags]\n"
                   "Prints versions, the machine, its GPUs, NCCL, Python and torch, and the settings in effect\n"
                   "(with these flags), as Markdown to paste into a bug report.\n";
      return 0;
    }
  }
  std::vector<std::string> flags = args;
  flags.push_back("--print_config");
  auto settings = config::parse_command_line(flags, env);

  std::ostringstream out;
  out << "Copy-and-paste the text below in your GitHub issue.\n\n";
  out << "- dtlaunch version: " << DTL_VERSION << "\n";
  utsname u{};
  std::string os = field("/etc/os-release", "PRETTY_NAME", '=');
  if (uname(&u) == 0) {
    out << "- Platform: " << u.sysname << " " << u.release << " " << u.machine << (os.empty() ? "" : ", " + os) << "\n";
  }
  std::string model = field("/proc/cpuinfo", "model name", ':');
  out << "- CPU: " << (model.empty() ? "?" : model) << ", " << posix::online_cpu_count() << " online, "
      << posix::cpu_count() << " in dtlaunch's affinity mask\n";
  auto meminfo = [](const std::string& key) {
    std::string v = field("/proc/meminfo", key, ':');  // "131072 kB"
    return kib_as_gib(v.substr(0, v.find(' ')));
  };
  out << "- Memory: " << meminfo("MemTotal") << " total, " << meminfo("MemAvailable") << " available\n";

  std::optional<int> fake;
  bool cpu_job = false;
  if (settings && settings->shown) {
    fake = settings->shown->fake_gpus;
    cpu_job = settings->shown->use_cpu;
  }
  auto inventory = node::discover_gpus(fake);
  auto details = inventory.source == "nvml" ? node::query_gpu_details() : std::nullopt;
  out << "- GPUs (" << inventory.source << "): " << inventory.gpus.size() << (cpu_job ? " (unused: use_cpu is set)" : "")
      << "\n";
  for (const auto& g : inventory.gpus) {
    out << "  - " << g.index << ": " << g.name;
    if (details && static_cast<size_t>(g.index) < details->memory_bytes.size() && details->memory_bytes[g.index] > 0) {
      out << ", " << gib(details->memory_bytes[g.index]);
    }
    out << ", " << g.uuid << "\n";
  }
  if (details && !details->driver_version.empty()) out << "- NVIDIA driver: " << details->driver_version << "\n";
  out << "- CUDA_VISIBLE_DEVICES: " << env("CUDA_VISIBLE_DEVICES").value_or("<unset>") << "\n";
  out << "- NCCL: " << nccl_version() << "\n";

  const std::string python = env("PYTHON_EXEC").value_or("python3");
  auto py = python_facts(python);
  if (py.size() < 2) {
    out << "- Python: not found (" << python << ")\n";
  } else {
    out << "- Python: " << py[0] << " (" << py[1] << ")\n";
    if (py.size() >= 6 && py[2] != "-") {
      out << "- torch: " << py[2] << ", CUDA " << py[3] << ", torch.cuda.is_available(): " << py[4]
          << ", torch's NCCL: " << py[5] << "\n";
    } else {
      out << "- torch: not importable" << (py.size() >= 4 ? " (" + py[3] + ")" : "") << "\n";
    }
  }
  // How a hang's stacks would be read here, and what that adds to the workers' environment.
  const auto tools = watch::find_stack_tools(py.size() >= 2 ? py[1] : python);
  out << "- Hang stacks: py-spy "
      << (tools.py_spy.empty() ? std::string("not installed (Python ranks' stacks come from faulthandler, registered by "
                                             "dtlaunch's sitecustomize.py)")
                               : tools.py_spy)
      << "; eu-stack " << (tools.eu_stack.empty() ? std::string("not installed") : tools.eu_stack) << "\n";
  // torch's flight recorder: what every worker gains while the hang watch is on (watch/flight_recorder.h)
  out << "- Flight recorder: with --hang_timeout above 0, the workers' PYTHONPATH is led by dtlaunch's "
         "sitecustomize.py, whose thread dumps a rank's record when dtlaunch asks (DTLAUNCH_FR_TRIGGER, a FIFO; the "
         "hook takes both out of the script's environment again); "
         "TORCH_FR_BUFFER_SIZE=2000, TORCH_FR_DUMP_TEMP_FILE and TORCH_NCCL_DEBUG_INFO_PIPE_FILE are set where "
         "unset (none with TORCH_FR_BUFFER_SIZE=0)\n";

  if (!settings) {
    out << "- Settings: error: " << settings.error().message << "\n";
  } else {
    out << "- Settings in effect:\n\n```yaml\n" << settings->output << "```\n";
    for (const auto& w : settings->warnings) out << "- Warning: " << w << "\n";
  }
  std::cout << out.str();
  return 0;
}

}  // namespace dtl::commands
