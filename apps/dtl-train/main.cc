// dtl-train: parse, read the launcher's environment, train; every failure becomes one line on
// stderr, torchrun's error file for the launcher's summary, and an exit code (2: bad input).
#include <chrono>
#include <iostream>

#include "options.h"
#include "report.h"
#include "train.h"

namespace {

long long epoch_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtl::train;
  const EnvLookup env = process_env();
  auto parsed = parse_train_args(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!parsed.options) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output << (parsed.output.ends_with('\n') ? "" : "\n");
    return parsed.exit_code;
  }
  LaunchEnv launch;
  try {
    launch = read_launch_env(env);
  } catch (const std::invalid_argument& e) {
    std::cerr << "dtl-train: error: " << e.what() << "\n";
    return 2;
  }
  try {
    return run_training(*parsed.options, launch);
  } catch (const UsageError& e) {
    write_error_file(launch.error_file, {"UsageError", e.what(), std::string("dtl-train: error: ") + e.what()},
                     epoch_seconds());
    std::cerr << "dtl-train: error: " << e.what() << "\n";
    return 2;
  } catch (const ReportedError& e) {
    write_error_file(launch.error_file, e.report, epoch_seconds());
    std::cerr << e.report.callstack << "\n";
    return 1;
  } catch (const std::exception& e) {
    ErrorReport r{type_name(e), e.what(), type_name(e) + ": " + e.what()};
    write_error_file(launch.error_file, r, epoch_seconds());
    std::cerr << "dtl-train: " << r.callstack << "\n";
    return 1;
  }
}
