// How a failing worker tells the launcher why: torchrun's error-file JSON at TORCHELASTIC_ERROR_FILE,
// which dtlaunch (and torchrun) show as the root cause, plus the error types that pick the exit code.
#pragma once

#include <chrono>
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

/// `{"message": {"message": "<type>: <msg>", "extraInfo": {"py_callstack": ..., "timestamp": "<s>"}}}`
std::string error_file_json(const ErrorReport& r, long long timestamp);

/// Writes the error file (best effort: a failure to report must not hide the failure). No-op for "".
void write_error_file(const std::string& path, const ErrorReport& r, long long timestamp);

/// Writes the error file, prints `line` to stderr and exits with `code` after `linger` (std::_Exit):
/// no destructor runs, so the process group stays open until the process is gone. Peers then see
/// this rank die only after its report exists, and no teardown can hang on a dead peer.
[[noreturn]] void exit_with_report(const std::string& error_file, const ErrorReport& r, const std::string& line,
                                   int code, std::chrono::milliseconds linger = {});

/// The readable name of an exception's dynamic type ("std::runtime_error").
std::string type_name(const std::exception& e);

std::string json_escape(const std::string& s);

}  // namespace dtl::train
