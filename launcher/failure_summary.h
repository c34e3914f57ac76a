// A failed worker and torchrun's failure summary ("<program> FAILED ... Root Cause"), with the
// error file a worker may leave at TORCHELASTIC_ERROR_FILE.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/failure.h"

namespace dtl::launcher {

/// Builds the failure record from a wait status, reading `error_file_path` if the worker wrote it.
Failure describe_failure(int local_rank, int rank, pid_t pid, int wait_status,
                         std::chrono::system_clock::time_point observed, const std::string& error_file_path);

/// torchrun's summary text, byte for byte in its layout (no trailing newline). `failures` non-empty;
/// `host` names the node of failures that carry none. The root cause is base/failure.h's.
std::string format_summary(const std::string& program, const std::vector<Failure>& failures,
                           const std::string& host);

}  // namespace dtl::launcher
