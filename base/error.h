// dtlaunch's one error type: what went wrong, for the user, and the exit code it ends the launch
// with. Libraries return or throw it with the bare message; the "dtlaunch: error: " prefix is added
// in one place, error_line, where main and the subcommands print it.
#pragma once

#include <stdexcept>
#include <string>

namespace dtl {

struct Error {
  std::string message;  ///< one line, without the "dtlaunch: error: " prefix
  int exit_code = 2;    ///< 2: bad input, nothing started; 1: something failed while running
};

/// The one way an error reaches the user: "dtlaunch: error: <message>" and a newline; `who` names a
/// subcommand's errors ("dtlaunch rdzv-server").
inline std::string error_line(const Error& e, const std::string& who = "dtlaunch") {
  return who + ": error: " + e.message + "\n";
}

/// An Error thrown through code that cannot return one (deep in a parser, a constructor).
class ErrorException : public std::runtime_error {
 public:
  explicit ErrorException(Error e) : std::runtime_error(e.message), error_(std::move(e)) {}
  const Error& error() const { return error_; }

 private:
  Error error_;
};

}  // namespace dtl
