// How a failing worker tells the launcher why: torchrun's error-file JSON at TORCHELASTIC_ERROR_FILE,
// which dtlaunch (and torchrun) show as the root cause, plus the error types that pick the exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace dtl::train {

/// Bad input found after flag parsing (data file, checkpoint of another model): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An exception described for the report: `type` as torchrun shows it ("c10::Error"), the message,
/// and the longer text shown as the traceback (the message with libtorch's C++ frames).
struct ErrorReport {
  std::string type;
  std::string message;
  std::string callstack;
};

/// Carries an ErrorReport out of the libtorch code (whose c10::Error is not visible in main).
struct ReportedError : std::runtime_error {
  explicit ReportedError(ErrorReport r) : std::runtime_error(r.message), report(std::move(r)) {}
  ErrorReport report;
};

/// `{"message": {"message": "<type>: <msg>", "extraInfo": {"py_callstack": ..., "timestamp": "<s>"}}}`
std::string error_file_json(const ErrorReport& r, long long timestamp);

/// Writes the error file (best effort: a failure to report must not hide the failure). No-op for "".
void write_error_file(const std::string& path, const ErrorReport& r, long long timestamp);

/// The readable name of an exception's dynamic type ("std::runtime_error").
std::string type_name(const std::exception& e);

std::string json_escape(const std::string& s);

}  // namespace dtl::train
