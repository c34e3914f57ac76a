#include "launcher/gpus.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "config/text.h"
#include "launcher/spawn.h"

namespace dtl::launcher {
namespace {

/// NVML through dlopen: no link-time dependency, so the binary runs on machines without a driver.
std::optional<std::vector<Gpu>> query_nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::nullopt;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  using HandleFn = int (*)(unsigned, void**);
  using StrFn = int (*)(void*, char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  auto count_fn = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid_fn = reinterpret_cast<StrFn>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto name_fn = reinterpret_cast<StrFn>(dlsym(lib, "nvmlDeviceGetName"));
  std::optional<std::vector<Gpu>> result;
  unsigned count = 0;
  if (init && shutdown && count_fn && handle_fn && uuid_fn && name_fn && init() == 0) {
    if (count_fn(&count) == 0) {
      result.emplace();
      for (unsigned i = 0; i < count; ++i) {
        void* dev = nullptr;
        char uuid[96] = {0}, name[96] = {0};
        if (handle_fn(i, &dev) != 0) continue;
        uuid_fn(dev, uuid, sizeof uuid);
        name_fn(dev, name, sizeof name);
        result->push_back(Gpu{static_cast<int>(i), uuid, name});
      }
    }
    shutdown();
  }
  dlclose(lib);
  return result;
}

std::optional<std::vector<Gpu>> query_nvidia_smi() {
  const char* path = std::getenv("PATH");
  if (!find_executable("nvidia-smi", path ? path : "")) return std::nullopt;
  FILE* pipe = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!pipe) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return parse_nvidia_smi_list(text);
}

}  // namespace

std::optional<GpuDetails> query_gpu_details() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::nullopt;
  struct Memory {
    unsigned long long total, free, used;
  };
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  using HandleFn = int (*)(unsigned, void**);
  using MemoryFn = int (*)(void*, Memory*);
  using DriverFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  auto count_fn = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto memory_fn = reinterpret_cast<MemoryFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto driver_fn = reinterpret_cast<DriverFn>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  std::optional<GpuDetails> result;
  if (init && shutdown && count_fn && handle_fn && memory_fn && driver_fn && init() == 0) {
    result.emplace();
    char driver[96] = {0};
    if (driver_fn(driver, sizeof driver) == 0) result->driver_version = driver;
    unsigned count = 0;
    if (count_fn(&count) == 0) {
      for (unsigned i = 0; i < count; ++i) {
        void* dev = nullptr;
        Memory m{0, 0, 0};
        if (handle_fn(i, &dev) != 0 || memory_fn(dev, &m) != 0) m.total = 0;
        result->memory_bytes.push_back(m.total);
      }
    }
    shutdown();
  }
  dlclose(lib);
  return result;
}

std::vector<Gpu> parse_nvidia_smi_list(const std::string& text) {
  static const std::regex line(R"(^GPU (\d+): (.*?) \(UUID: ([^)]+)\)\s*$)");
  std::vector<Gpu> gpus;
  std::stringstream ss(text);
  std::string l;
  std::smatch m;
  while (std::getline(ss, l)) {
    if (std::regex_match(l, m, line)) gpus.push_back(Gpu{std::stoi(m[1]), m[3], m[2]});
  }
  return gpus;
}

GpuInventory discover_gpus(std::optional<int> fake) {
  if (fake) {
    GpuInventory inv{{}, "fake"};
    for (int i = 0; i < *fake; ++i) {
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "GPU-fake0000-0000-0000-0000-%012d", i);
      inv.gpus.push_back(Gpu{i, uuid, "fake GPU"});
    }
    return inv;
  }
  if (auto g = query_nvml()) return {std::move(*g), "nvml"};
  if (auto g = query_nvidia_smi()) return {std::move(*g), "nvidia-smi"};
  return {{}, "none"};
}

GpuSelection select_gpus(const std::vector<Gpu>& all, const std::optional<std::string>& inherited_visible,
                         const std::optional<std::vector<int>>& gpu_ids) {
  std::vector<std::string> visible;
  if (!inherited_visible) {
    for (const auto& g : all) visible.push_back(std::to_string(g.index));
  } else if (!inherited_visible->empty()) {
    for (const auto& token : text::split(*inherited_visible, ',')) {
      const std::string where = "CUDA_VISIBLE_DEVICES=" + *inherited_visible + ": ";
      if (token.rfind("GPU-", 0) == 0) {
        int matches = 0;
        for (const auto& g : all) matches += g.uuid.rfind(token, 0) == 0;
        if (matches != 1 && !all.empty()) {
          return where + (matches ? "'" + token + "' matches several GPUs" : "no GPU has UUID '" + token + "'");
        }
        visible.push_back(token);
      } else if (token.rfind("MIG-", 0) == 0) {
        visible.push_back(token);
      } else {
        char* end = nullptr;
        long idx = std::strtol(token.c_str(), &end, 10);
        if (token.empty() || *end != '\0') return where + "'" + token + "' is neither a GPU index nor a UUID";
        if (idx < 0) break;  // CUDA stops at the first negative index
        bool known = false;
        for (const auto& g : all) known |= g.index == idx;
        if (!known) {
          return where + "no GPU " + token + " on this machine (" + std::to_string(all.size()) + " found)";
        }
        visible.push_back(token);
      }
    }
  }
  if (!gpu_ids) return visible;
  std::vector<std::string> chosen;
  for (int id : *gpu_ids) {
    if (id >= static_cast<int>(visible.size())) {
      return "--gpu_ids: GPU " + std::to_string(id) + " is not visible (visible: " +
             (visible.empty() ? std::string("none") : text::join(visible)) + ")";
    }
    chosen.push_back(visible[id]);
  }
  return chosen;
}

}  // namespace dtl::launcher
