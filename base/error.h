// dtlaunch's one error type: what went wrong, for the user, and the exit code it ends the launch
// with. Whatever can fail with such an error returns a Result<T> or a Status, with the bare
// message; the "dtlaunch: error: " prefix is added in one place, error_line, where main and the
// subcommands print it.
#pragma once

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace dtl {

struct Error {
  std::string message;  ///< one line, without the "dtlaunch: error: " prefix
  int exit_code = 2;    ///< 2: bad input, nothing started; 1: something failed while running
};

/// A T, or the Error that stopped it; Status: nothing, or the Error. Callers test it and pass the
/// Error on (`if (!r) return tl::unexpected(r.error());`) or read the value (`*r`). tl::expected
/// because C++20 has no std::expected, and libstdc++ 12's <expected> does not compile under clang
/// 14, which builds the fuzzers.
template <class T>
using Result = tl::expected<T, Error>;
using Status = Result<void>;

/// The failed Result or Status: `return fail("--port: expected ...");`.
inline tl::unexpected<Error> fail(std::string message, int exit_code = 2) {
  return tl::unexpected<Error>(Error{std::move(message), exit_code});
}

/// The one way an error reaches the user: "dtlaunch: error: <message>" and a newline; `who` names a
/// subcommand's errors ("dtlaunch rdzv-server").
inline std::string error_line(const Error& e, const std::string& who = "dtlaunch") {
  return who + ": error: " + e.message + "\n";
}

}  // namespace dtl
