#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/dtl-train/atomic_file.h"
#include "apps/dtl-train/blas.h"
#include "apps/dtl-train/metrics.h"
#include "apps/dtl-train/report.h"

using namespace dtl::train;

TEST_CASE("dtl-train: the error file is torchrun's JSON, escaped") {
  ErrorReport r{"std::runtime_error", "bad \"thing\"", "rank 1 failed:\nstd::runtime_error: bad"};
  CHECK(error_file_json(r, 1700000000) ==
        "{\"message\": {\"message\": \"std::runtime_error: bad \\\"thing\\\"\", \"extraInfo\": {\"py_callstack\": "
        "\"rank 1 failed:\\nstd::runtime_error: bad\", \"timestamp\": \"1700000000\"}}}\n");
  CHECK(json_escape(std::string("\x01\t", 2)) == "\\u0001\\t");
  CHECK(type_name(std::invalid_argument("x")) == "std::invalid_argument");
}

TEST_CASE("dtl-train: an atomic write replaces the file and leaves no temp file behind") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "dtl-train-atomic-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "checkpoint.pt").string();
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  CHECK(s.str() == "second");
  std::ofstream(path + ".tmp.999") << "half written";
  remove_stale_temps(path);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
  CHECK_THROWS_AS(write_file_atomically((dir / "missing" / "x").string(), "x"), std::system_error);
  fs::remove_all(dir);
}

TEST_CASE("dtl-train: allreduce time after backward ends is exposed, the rest was hidden") {
  // Two overlapping buckets during backward (0..3 busy), one that ends 1 s after backward (at 4).
  auto t = comm_timing({{0, 2}, {1, 3}, {3.5, 5}}, 4.0);
  CHECK(t.busy == Approx(4.5));
  CHECK(t.exposed == Approx(1.0));
  CHECK(t.hidden_share() == Approx(1 - 1.0 / 4.5));
  CHECK(comm_timing({}, 1.0).hidden_share() == 1.0);
}

TEST_CASE("dtl-train: a step record reads the same in the log and in the metrics") {
  StepRecord r;
  r.step = 10;
  r.steps = 100;
  r.loss = 4.5;
  r.lr = 1e-3;
  r.tokens_per_s = 12345.4;
  r.step_time_s = 0.0831;
  r.comm_wait_share = 0.021;
  r.comm_hidden_share = 0.95;
  r.tokens = 10240;
  CHECK(log_line(r) == "step 10/100 loss 4.5000 lr 1.00e-03 tokens/s 12345 step 83.1 ms comm wait 2.1% hidden 95.0%");
  CHECK(metrics_json(r).rfind("{\"step\": 10, \"loss\": 4.5, \"lr\": 0.001,", 0) == 0);
  r.comm_hidden_share = std::nan("");
  r.mfu = 0.412;
  CHECK(metrics_json(r).find("\"comm_hidden_share\": null, \"mfu\": 0.412,") != std::string::npos);
  CHECK(log_line(r) == "step 10/100 loss 4.5000 lr 1.00e-03 tokens/s 12345 step 83.1 ms comm wait 2.1% hidden n/a mfu 41.2%");
}

TEST_CASE("dtl-train: the reference BLAS is named, with what to install; optimised ones are not") {
  const std::string ref = blas_advice("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3");
  CHECK(ref ==
        "matrix products run on the reference BLAS (/usr/lib/x86_64-linux-gnu/blas/libblas.so.3), about 20x "
        "slower than an optimised one; install one, e.g. apt-get install libopenblas0-pthread");
  CHECK(blas_advice("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").empty());
  CHECK(blas_advice("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3").empty());
  CHECK(blas_advice("/opt/intel/mkl/lib/libblas.so.3").empty());
}

TEST_CASE("dtl-train: OpenBLAS's AVX2 kernels on an AVX-512 CPU are named with the variable that fixes it") {
  CHECK(openblas_core_advice("Haswell", true, std::nullopt) ==
        "OpenBLAS runs its Haswell kernels on this CPU, which has AVX-512; OPENBLAS_CORETYPE=SkylakeX selects its "
        "AVX-512 kernels (about 2x faster matrix products on an AMD Zen 5)");
  CHECK(openblas_core_advice("Haswell", true, std::string("Haswell")) ==
        "OpenBLAS runs its Haswell kernels on this CPU, which has AVX-512, because OPENBLAS_CORETYPE=Haswell is set; "
        "without it OpenBLAS picks its AVX-512 kernels (about 2x faster matrix products on an AMD Zen 5)");
  CHECK(openblas_core_advice("Zen", true, std::string("")) == openblas_core_advice("Zen", true, std::nullopt));
  CHECK(openblas_core_advice("Haswell", false, std::nullopt).empty());  // no AVX-512: Haswell is the best it has
  CHECK(openblas_core_advice("Haswell", false, std::string("Haswell")).empty());
  CHECK(openblas_core_advice("SkylakeX", true, std::string("SkylakeX")).empty());
  CHECK(openblas_core_advice("Cooperlake", true, std::nullopt).empty());
  CHECK(openblas_core_advice("SapphireRapids", true, std::nullopt).empty());
  // A build for one target names it in capitals, and OPENBLAS_CORETYPE does not apply to it.
  CHECK(openblas_core_advice("SKYLAKEX", true, std::nullopt).empty());
  CHECK(openblas_core_advice("HASWELL", true, std::string("SkylakeX")) ==
        "OpenBLAS runs its HASWELL kernels on this CPU, which has AVX-512; this OpenBLAS was built for them alone, and "
        "one built with DYNAMIC_ARCH (Debian's) picks AVX-512 kernels (about 2x faster matrix products on an AMD Zen 5)");
}
