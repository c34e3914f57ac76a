// A failed worker and torchrun's failure summary ("<program> FAILED ... Root Cause"), with the
// error file a worker may leave at TORCHELASTIC_ERROR_FILE.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dtl::launcher {

struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  int exitcode = 1;  ///< torchrun's convention: -N for death by signal N
  std::chrono::system_clock::time_point observed;  ///< when dtlaunch reaped it: orders root causes
  std::string error_file = "<N/A>";  ///< path, or <N/A> when the worker wrote none
  std::string message;               ///< the traceback line(s) shown in the summary
  long long timestamp = 0;           ///< seconds since epoch shown as `time`
  std::string host;                  ///< the node it failed on; empty: this one
};

/// Builds the failure record from a wait status, reading `error_file_path` if the worker wrote it.
WorkerFailure describe_failure(int local_rank, int rank, pid_t pid, int wait_status,
                               std::chrono::system_clock::time_point observed,
                               const std::string& error_file_path);

/// "SIGSEGV" for 11; "SIG<n>" for numbers without a name.
std::string signal_name(int sig);

/// The first observed failure (earliest `observed`; lowest rank on ties).
const WorkerFailure& root_cause(const std::vector<WorkerFailure>& failures);

/// dtlaunch's exit code for a root cause: the worker's exit code, or 128+N for signal N.
int exit_code_for(const WorkerFailure& f);

/// torchrun's summary text, byte for byte in its layout (no trailing newline). `failures` non-empty;
/// `host` names the node of failures that carry none.
std::string format_summary(const std::string& program, const std::vector<WorkerFailure>& failures,
                           const std::string& host);

}  // namespace dtl::launcher
