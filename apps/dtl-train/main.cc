// dtl-train: parse, read the launcher's environment, train; every failure becomes one line on
// stderr, torchrun's error file for the launcher's summary, and an exit code (2: bad input).
#include <malloc.h>

#include <iostream>

#include "options.h"
#include "report.h"
#include "train.h"

namespace {

/// Every step frees and reallocates the same activation tensors (MBs each). With glibc's defaults,
/// blocks above the mmap threshold are mmapped and unmapped each time, and a freed heap top above
/// the trim threshold goes back to the kernel: the next step then takes a page fault per 4 KiB and
/// the kernel zeroes each page again. Keep such memory in the process instead (like PyTorch's
/// caching allocator does on a GPU): blocks up to 32 MiB (glibc's maximum mmap threshold) come
/// from the heap, and the heap is not trimmed.
void keep_freed_memory() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtl::train;
  keep_freed_memory();
  const EnvLookup env = process_env();
  auto parsed = parse_train_args(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!parsed.options) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output << (parsed.output.ends_with('\n') ? "" : "\n");
    return parsed.exit_code;
  }
  if (!parsed.options->consolidate.empty()) return run_consolidation(*parsed.options);
  LaunchEnv launch;
  try {
    launch = read_launch_env(env);
  } catch (const std::invalid_argument& e) {
    std::cerr << "dtl-train: error: " << e.what() << "\n";
    return 2;
  }
  try {
    return run_training(*parsed.options, launch);  // reports and exits by itself on failure
  } catch (const std::exception& e) {
    const std::string text = type_name(e) + ": " + e.what();
    exit_with_report(launch.error_file, {type_name(e), e.what(), text}, "dtl-train: " + text, 1);
  }
}
