// What a peer sent, made safe to print: a run id or host name from the network goes into the
// host's console, where a newline would forge a log line and an escape sequence drive the terminal.
// (Named for the rendezvous; base/ may gain a general escaper for error messages, to merge with.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtl::rendezvous {

/// Bytes of a peer's text kept in a log line; the rest is counted, not shown.
inline constexpr size_t kMaxPrintable = 200;

/// `text` with every byte a terminal could act on escaped as C writes it (\n, \r, \t, \e, \xNN):
/// control characters, DEL, C1 controls (U+0080..U+009F), and bytes that are not valid UTF-8.
/// Other UTF-8 stays as it is, and so does a backslash, so that text escaped once (a server's
/// refusal, printed again by the node) is not escaped twice. Longer than `max` bytes: cut there
/// (never inside an escape or a character), with "... (N bytes)" after it.
std::string printable(std::string_view text, size_t max = kMaxPrintable);

}  // namespace dtl::rendezvous
