#include <catch2/catch.hpp>

#include "base/error.h"
#include "base/printable.h"

using dtl::printable;

TEST_CASE("printable keeps plain text and UTF-8 as they are") {
  CHECK(printable("") == "");
  CHECK(printable("nproc_per_node: gpu, 8 (ok)") == "nproc_per_node: gpu, 8 (ok)");
  CHECK(printable("Grüße 日本 🚀") == "Grüße 日本 🚀");
}

TEST_CASE("printable escapes what would break the line or drive the terminal") {
  CHECK(printable("a\nb") == "a\\nb");
  CHECK(printable("a\r\tb") == "a\\r\\tb");
  CHECK(printable("\x1b[2J") == "\\x1b[2J");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("C:\\dir") == "C:\\\\dir");  // a backslash is doubled, so that \n in the output is never ambiguous
  CHECK(printable("\xc2\x9b" "2J") == "\\xc2\\x9b2J");  // U+009B, the one-byte CSI of 8-bit terminals
}

TEST_CASE("printable escapes each byte that is no UTF-8") {
  CHECK(printable("\xff") == "\\xff");
  CHECK(printable("a\xc3") == "a\\xc3");                   // cut short
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");            // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");   // a UTF-16 surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");
  CHECK(printable("\x80" "ok") == "\\x80ok");
}

TEST_CASE("printable's output is one line of printable ASCII or UTF-8, whatever the input") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string out = printable(all + all);
  CHECK(out.find('\n') == std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);
  CHECK(printable(out) == dtl::printable(out));  // stable
}
