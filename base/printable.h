// Text from a user, a file or a peer, made safe to echo into one line of a message.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace dtl {

/// `s` as one line of plain text, for echoing a value a user, a file or a peer gave into a message:
/// control characters as \n, \r, \t, \x1b, ..., a backslash as \\, and bytes that are no UTF-8
/// (and the C1 controls, which some terminals obey) as \xNN; valid UTF-8 text is kept as it is.
/// Past `max` bytes the text is cut (never inside an escape or a character) and "... (N bytes)"
/// follows. `escape_backslash` false leaves backslashes alone, so that text escaped once (a
/// rendezvous refusal, printed again by the node it reached) is not escaped twice.
inline std::string printable(std::string_view s, size_t max = std::string_view::npos, bool escape_backslash = true) {
  static const char hex[] = "0123456789abcdef";
  std::string out, piece;
  out.reserve(std::min(s.size(), max));
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t used = 1;
    piece.clear();
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\' && escape_backslash) piece += '\\';
      piece += static_cast<char>(c);
    } else if (c == '\n' || c == '\r' || c == '\t') {
      piece = {'\\', c == '\n' ? 'n' : c == '\r' ? 'r' : 't'};
    } else {
      // A UTF-8 sequence: its length from the lead byte, the smallest code point of that length,
      // and no surrogates, C1 controls or code points past U+10FFFF (those are what makes it valid).
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
      if (valid) {
        piece.assign(s.substr(i, len));
        used = len;
      } else {
        piece = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      }
    }
    if (max != std::string_view::npos && out.size() + piece.size() > max) break;
    out += piece;
    i += used;
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace dtl
