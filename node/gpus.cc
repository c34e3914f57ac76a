#include "node/gpus.h"

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <utility>

#include "base/posix.h"
#include "base/text.h"
#include "node/numa.h"

namespace dtl::node {
namespace {

/// A broken driver can hang nvidia-smi; dtlaunch then goes on without GPUs rather than wait for ever.
constexpr std::chrono::seconds kNvidiaSmiTimeout{60};

/// One NVML session: the library loaded at run time (no link-time dependency, so the binary runs on
/// machines without a driver) and initialised, then shut down when this goes.
class Nvml {
 public:
  Nvml() {
    auto init = lib_.function<int()>("nvmlInit_v2");
    shutdown_ = lib_.function<int()>("nvmlShutdown");
    count_ = lib_.function<int(unsigned*)>("nvmlDeviceGetCount_v2");
    handle_ = lib_.function<int(unsigned, void**)>("nvmlDeviceGetHandleByIndex_v2");
    ready_ = init && shutdown_ && count_ && handle_ && init() == 0;
  }
  ~Nvml() {
    if (ready_) shutdown_();
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  /// Initialised, and `symbols` are all there.
  template <class... Fn>
  bool ready(Fn*... symbols) const {
    return ready_ && (... && symbols);
  }
  template <class Fn>
  Fn* function(const char* name) const {
    return lib_.function<Fn>(name);
  }
  /// One handle per device by NVML index (nullptr for one NVML cannot open); none when it cannot count.
  std::optional<std::vector<void*>> devices() const {
    unsigned count = 0;
    if (!ready_ || count_(&count) != 0) return std::nullopt;
    std::vector<void*> out(count, nullptr);
    for (unsigned i = 0; i < count; ++i) {
      if (handle_(i, &out[i]) != 0) out[i] = nullptr;
    }
    return out;
  }

 private:
  posix::Library lib_{"libnvidia-ml.so.1"};
  bool ready_ = false;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*handle_)(unsigned, void**) = nullptr;
};

/// nvmlPciInfo_t (nvml.h), as nvmlDeviceGetPciInfo_v3 fills it.
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

std::optional<std::vector<Gpu>> query_nvml() {
  Nvml nvml;
  auto uuid_fn = nvml.function<int(void*, char*, unsigned)>("nvmlDeviceGetUUID");
  auto name_fn = nvml.function<int(void*, char*, unsigned)>("nvmlDeviceGetName");
  auto pci_fn = nvml.function<int(void*, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3");  // optional: for --numa_binding
  auto devices = nvml.ready(uuid_fn, name_fn) ? nvml.devices() : std::nullopt;
  if (!devices) return std::nullopt;
  std::vector<Gpu> gpus;
  for (size_t i = 0; i < devices->size(); ++i) {
    void* dev = (*devices)[i];
    if (!dev) continue;
    char uuid[96] = {0}, name[96] = {0};
    uuid_fn(dev, uuid, sizeof uuid);
    name_fn(dev, name, sizeof name);
    NvmlPciInfo pci{};
    const bool has_pci = pci_fn && pci_fn(dev, &pci) == 0;
    gpus.push_back(Gpu{static_cast<int>(i), uuid, name, has_pci ? sysfs_pci_address(pci.domain, pci.bus, pci.device) : ""});
  }
  return gpus;
}

std::optional<std::vector<Gpu>> query_nvidia_smi() {
  // Most machines without NVML have no nvidia-smi either: looking first saves every launch a fork.
  const char* path = std::getenv("PATH");
  const auto exe = posix::find_executable("nvidia-smi", path ? path : "");
  if (!exe) return std::nullopt;
  auto run = posix::run_program({*exe, "-L"}, kNvidiaSmiTimeout);  // the path found: no second PATH walk
  if (run.exit_code != 0) return std::nullopt;
  return parse_nvidia_smi_list(run.lines);
}

}  // namespace

std::optional<GpuDetails> query_gpu_details() {
  struct Memory {
    unsigned long long total, free, used;
  };
  Nvml nvml;
  auto memory_fn = nvml.function<int(void*, Memory*)>("nvmlDeviceGetMemoryInfo");
  auto driver_fn = nvml.function<int(char*, unsigned)>("nvmlSystemGetDriverVersion");
  if (!nvml.ready(memory_fn, driver_fn)) return std::nullopt;
  GpuDetails details;
  char driver[96] = {0};
  if (driver_fn(driver, sizeof driver) == 0) details.driver_version = driver;
  for (void* dev : nvml.devices().value_or(std::vector<void*>{})) {
    Memory m{0, 0, 0};
    if (!dev || memory_fn(dev, &m) != 0) m.total = 0;
    details.memory_bytes.push_back(m.total);
  }
  return details;
}

/// nvmlUtilization_t and nvmlMemory_t (nvml.h).
struct GpuMeter::Session {
  struct Utilization {
    unsigned gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  Nvml nvml;
  int (*uuid)(void*, char*, unsigned) = nvml.function<int(void*, char*, unsigned)>("nvmlDeviceGetUUID");
  int (*utilization)(void*, Utilization*) = nvml.function<int(void*, Utilization*)>("nvmlDeviceGetUtilizationRates");
  int (*memory)(void*, Memory*) = nvml.function<int(void*, Memory*)>("nvmlDeviceGetMemoryInfo");
  std::vector<void*> devices = nvml.ready(uuid) ? nvml.devices().value_or(std::vector<void*>{}) : std::vector<void*>{};
  std::vector<std::string> uuids;  ///< read once: they do not change
};

GpuMeter::GpuMeter() = default;
GpuMeter::~GpuMeter() = default;

std::vector<GpuReading> GpuMeter::read() {
  if (!std::exchange(tried_, true)) {
    session_ = std::make_unique<Session>();
    for (void* dev : session_->devices) {
      char uuid[96] = {0};
      if (dev) session_->uuid(dev, uuid, sizeof uuid);
      session_->uuids.emplace_back(uuid);
    }
    if (session_->devices.empty()) session_.reset();  // no driver: NVML is not asked again
  }
  std::vector<GpuReading> out;
  if (!session_) return out;
  for (size_t i = 0; i < session_->devices.size(); ++i) {
    void* dev = session_->devices[i];
    GpuReading r{session_->uuids[i], std::nullopt, std::nullopt, std::nullopt};
    Session::Utilization u{0, 0};
    if (dev && session_->utilization && session_->utilization(dev, &u) == 0) r.util_percent = u.gpu;
    Session::Memory m{0, 0, 0};
    if (dev && session_->memory && session_->memory(dev, &m) == 0) {
      r.memory_used_bytes = m.used;
      r.memory_total_bytes = m.total;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Gpu> parse_nvidia_smi_list(const std::vector<std::string>& lines) {
  static const std::regex gpu_line(R"(^GPU (\d+): (.*?) \(UUID: ([^)]+)\)\s*$)");
  std::vector<Gpu> gpus;
  std::smatch m;
  for (const auto& l : lines) {
    if (std::regex_match(l, m, gpu_line)) gpus.push_back(Gpu{std::stoi(m[1]), m[3], m[2]});
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

Result<std::vector<std::string>> select_gpus(const std::vector<Gpu>& all,
                                             const std::optional<std::string>& inherited_visible,
                                             const std::optional<std::vector<int>>& gpu_ids, const std::string& ids_called) {
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
          return fail(where + (matches ? "'" + token + "' matches several GPUs" : "no GPU has UUID '" + token + "'"));
        }
        visible.push_back(token);
      } else if (token.rfind("MIG-", 0) == 0) {
        visible.push_back(token);
      } else {
        char* end = nullptr;
        long idx = std::strtol(token.c_str(), &end, 10);
        if (token.empty() || *end != '\0') return fail(where + "'" + token + "' is neither a GPU index nor a UUID");
        if (idx < 0) break;  // CUDA stops at the first negative index
        bool known = false;
        for (const auto& g : all) known |= g.index == idx;
        if (!known) {
          return fail(where + "no GPU " + token + " on this machine (" + std::to_string(all.size()) + " found)");
        }
        visible.push_back(token);
      }
    }
  }
  if (!gpu_ids) return visible;
  std::vector<std::string> chosen;
  for (int id : *gpu_ids) {
    if (id >= static_cast<int>(visible.size())) {
      return fail(ids_called + ": GPU " + std::to_string(id) + " is not visible (visible: " +
                  (visible.empty() ? std::string("none") : text::join(visible)) + ")");
    }
    chosen.push_back(visible[id]);
  }
  return chosen;
}

}  // namespace dtl::node
