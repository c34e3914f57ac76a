// A stand-in for libnvidia-ml.so.1, for the GPU discovery tests on machines without a driver:
// FAKE_NVML_GPUS=N devices, device i with (i+1)*16 GiB of which (i+1) GiB used, 10*(i+1) % busy, at PCI
// address 0000:(i+1):00.0; without the variable nvmlInit fails, as
// it does where the driver is not loaded. Only the functions dtlaunch looks up.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;

unsigned index_of(void* device) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1); }

}  // namespace

extern "C" {

struct FakeNvmlMemory {
  unsigned long long total, free, used;
};

int nvmlInit_v2() { return std::getenv("FAKE_NVML_GPUS") ? kSuccess : kUninitialized; }

int nvmlShutdown() { return kSuccess; }

int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = static_cast<unsigned>(std::atoi(std::getenv("FAKE_NVML_GPUS")));
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetUUID(void* device, char* out, unsigned size) {
  std::snprintf(out, size, "GPU-fakenvml-%u", index_of(device));
  return kSuccess;
}

int nvmlDeviceGetName(void*, char* out, unsigned size) {
  std::snprintf(out, size, "Fake NVML GPU");
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* device, FakeNvmlMemory* memory) {
  const unsigned long long gib = 1ull << 30;
  const unsigned long long total = (index_of(device) + 1) * 16 * gib, used = (index_of(device) + 1) * gib;
  *memory = {total, total - used, used};
  return kSuccess;
}

struct FakeNvmlUtilization {
  unsigned gpu, memory;
};

int nvmlDeviceGetUtilizationRates(void* device, FakeNvmlUtilization* utilization) {
  *utilization = {10 * (index_of(device) + 1) % 100, 5};
  return kSuccess;
}

struct FakeNvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

int nvmlDeviceGetPciInfo_v3(void* device, FakeNvmlPciInfo* pci) {
  *pci = {};
  pci->bus = index_of(device) + 1;
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", pci->bus);
  std::snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "0000:%02X:00.0", pci->bus);
  return kSuccess;
}

int nvmlSystemGetDriverVersion(char* out, unsigned size) {
  std::snprintf(out, size, "999.99");
  return kSuccess;
}

}  // extern "C"
