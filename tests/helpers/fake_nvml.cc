// A stand-in for libnvidia-ml.so.1, for the GPU discovery tests on machines without a driver:
// FAKE_NVML_GPUS=N devices, device i with (i+1)*16 GiB; without the variable nvmlInit fails, as
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
  *memory = {(index_of(device) + 1) * 16 * gib, 0, 0};
  return kSuccess;
}

int nvmlSystemGetDriverVersion(char* out, unsigned size) {
  std::snprintf(out, size, "999.99");
  return kSuccess;
}

}  // extern "C"
