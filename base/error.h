// dtlaunch's one error type: what went wrong, for the user, and the exit code it ends the launch
// with. Libraries return or throw it with the bare message; the "dtlaunch: error: " prefix is added
// in one place, error_line, where main and the subcommands print it.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

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

/// `s` as one line of plain text, for echoing a value a user or a file gave into a message: control
/// characters as \n, \t, \x1b, ..., a backslash as \\, and bytes that are no UTF-8 (and the C1
/// controls, which some terminals obey) as \xNN; valid UTF-8 text is kept as it is.
inline std::string printable(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  auto escape = [&](unsigned char c) { out += {'\\', 'x', hex[c >> 4], hex[c & 15]}; };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += {'\\', c == '\n' ? 'n' : c == '\r' ? 'r' : 't'};
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, the smallest code point of that length, and
    // no surrogates or code points past U+10FFFF (those are what makes it valid).
    const size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    char32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    bool valid = len != 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      valid = (b & 0xc0) == 0x80;
      cp = (cp << 6) | (b & 0x3f);
    }
    valid = valid && !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
            !(cp >= 0xd800 && cp <= 0xdfff) && !(cp >= 0x80 && cp <= 0x9f);
    if (!valid) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
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
