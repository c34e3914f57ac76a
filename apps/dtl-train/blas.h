// Which BLAS the CPU's matrix products run on. Debian's libtorch calls whatever libblas.so.3 the
// system's alternatives point at, and until an optimised one is installed that is Netlib's
// reference BLAS, ~20x slower for training than OpenBLAS: worth one line at start.
#pragma once

#include <optional>
#include <string>

#include "cpu_kernels.h"

namespace dtl::train {

/// The resolved path of the libblas.so loaded into this process, if one is.
std::optional<std::string> loaded_blas();

/// What to tell the user when `path` is the reference BLAS (Debian's .../blas/libblas.so.3);
/// empty for any other (OpenBLAS, BLIS, MKL...).
std::string blas_advice(const std::string& path);

/// The kernel set OpenBLAS chose at load (openblas_get_corename: "Haswell", "SkylakeX", ...);
/// std::nullopt when the BLAS is not OpenBLAS.
std::optional<std::string> openblas_core();

/// Whether this CPU has what OpenBLAS's AVX-512 kernels need (AVX512 F, CD, BW, DQ and VL).
bool cpu_has_avx512();

/// What to tell the user when OpenBLAS runs kernels below what the CPU can (AVX2 ones on an
/// AVX-512 CPU: half the speed of its AVX-512 ones on a Zen 5), given OPENBLAS_CORETYPE if it is
/// set: usually that variable is why (a shell or a machine image that sets it for another CPU).
/// Empty when there is nothing to say. Pure.
std::string openblas_core_advice(const std::string& core, bool cpu_avx512, const std::optional<std::string>& coretype);

/// cblas_sgemm of the BLAS already in the process (libtorch's: Debian's libblas.so.3 exports it),
/// else the same call through its Fortran sgemm_ (the pip wheels' libtorch_cpu exports only that),
/// else nullptr: the fused attention then falls back to torch's ops.
CblasSgemm process_cblas_sgemm();

/// The Fortran route alone (nullptr without sgemm_), for the tests.
CblasSgemm process_fortran_sgemm();

}  // namespace dtl::train
