#include "blas.h"

#include <dlfcn.h>
#include <link.h>

#include <cctype>
#include <filesystem>

namespace dtl::train {

std::optional<std::string> loaded_blas() {
  std::optional<std::string> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("/libblas.so") == std::string::npos) return 0;
        std::error_code ec;
        auto real = std::filesystem::canonical(name, ec);
        *static_cast<std::optional<std::string>*>(data) = ec ? name : real.string();
        return 1;
      },
      &found);
  return found;
}

std::string blas_advice(const std::string& path) {
  // Debian and Ubuntu install Netlib's reference BLAS as .../blas/libblas.so.3; the optimised
  // ones live in folders of their own (openblas-pthread/, blis-openmp/, ...).
  if (std::filesystem::path(path).parent_path().filename() != "blas") return "";
  return "matrix products run on the reference BLAS (" + path +
         "), about 20x slower than an optimised one; install one, e.g. apt-get install libopenblas0-pthread";
}

std::optional<std::string> openblas_core() {
  using CoreName = char* (*)();
  auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* core = name ? name() : nullptr;
  if (!core) return std::nullopt;
  return std::string(core);
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

std::string openblas_core_advice(const std::string& core, bool cpu_avx512, const std::optional<std::string>& coretype) {
  // OpenBLAS's x86-64 kernel sets that use AVX-512. A DYNAMIC_ARCH build (Debian's) names them
  // "SkylakeX"; a build for one target names that target in capitals ("SKYLAKEX").
  std::string lower = core;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (lower == avx512) return "";
  }
  if (!cpu_avx512) return "";
  const std::string what = "OpenBLAS runs its " + core + " kernels on this CPU, which has AVX-512";
  const std::string gain = " (about 2x faster matrix products on an AMD Zen 5)";
  const bool one_target = core.find_first_of("abcdefghijklmnopqrstuvwxyz") == std::string::npos;
  if (one_target) return what + "; this OpenBLAS was built for them alone, and one built with DYNAMIC_ARCH (Debian's) picks AVX-512 kernels" + gain;
  if (coretype && !coretype->empty()) {
    return what + ", because OPENBLAS_CORETYPE=" + *coretype + " is set; without it OpenBLAS picks its AVX-512 kernels" +
           gain;
  }
  return what + "; OPENBLAS_CORETYPE=SkylakeX selects its AVX-512 kernels" + gain;
}

namespace {

// The reference BLAS's gfortran ABI: character arguments carry hidden lengths at the end.
using FortranSgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                              const int*, const float*, const int*, const float*, float*, const int*, size_t, size_t);

FortranSgemm fortran_sgemm() {
  static const auto found = reinterpret_cast<FortranSgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return found;
}

/// cblas_sgemm for row-major layout through the column-major sgemm_: C^T = op(B)^T op(A)^T.
void row_major_through_fortran(int, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                               const float* b, int ldb, float beta, float* c, int ldc) {
  const char ta = trans_a == kCblasTrans ? 'T' : 'N', tb = trans_b == kCblasTrans ? 'T' : 'N';
  fortran_sgemm()(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc, 1, 1);
}

}  // namespace

CblasSgemm process_fortran_sgemm() { return fortran_sgemm() ? &row_major_through_fortran : nullptr; }

CblasSgemm process_cblas_sgemm() {
  static const CblasSgemm found = [] {
    auto cblas = reinterpret_cast<CblasSgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    return cblas ? cblas : process_fortran_sgemm();
  }();
  return found;
}

}  // namespace dtl::train
