// What a peer sent, made safe to print: a run id or host name from the network goes into the
// host's console, where a newline would forge a log line and an escape sequence drive the terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/printable.h"

namespace dtl::rendezvous {

/// Bytes of a peer's text kept in a log line; the rest is counted, not shown.
inline constexpr size_t kMaxPrintable = 200;

/// dtl::printable, cut at `max` bytes, and leaving backslashes alone: a server's refusal, escaped
/// once, is printed again by the node it reached.
inline std::string printable(std::string_view text, size_t max = kMaxPrintable) {
  return dtl::printable(text, max, /*escape_backslash=*/false);
}

}  // namespace dtl::rendezvous
