#include "blas.h"

#include <dlfcn.h>
#include <link.h>

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

CblasSgemm process_cblas_sgemm() {
  static const CblasSgemm found = reinterpret_cast<CblasSgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  return found;
}

}  // namespace dtl::train
