#include "rendezvous/printable.h"
#include "base/printable.h"

#include <catch2/catch.hpp>

#include <vector>

using dtl::rendezvous::printable;

TEST_CASE("a peer's newline and escape sequence are escaped, so it can forge no log line and drive no terminal") {
  CHECK(printable("x\ndtlaunch: info: forged\x1b[2J\r") == "x\\ndtlaunch: info: forged\\x1b[2J\\r");
  CHECK(printable("a\tb\x7f") == "a\\tb\\x7f");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
}

TEST_CASE("ordinary text, UTF-8 and backslashes stay as they are, so escaping twice changes nothing") {
  CHECK(printable("job-42 'ünïcode' ✓ \\n") == "job-42 'ünïcode' ✓ \\n");
  CHECK(printable(printable("a\nb")) == "a\\nb");
}

TEST_CASE("C1 controls and bytes that are not UTF-8 are written as \\xNN") {
  CHECK(printable("\xc2\x9b"  "2J") == "\\xc2\\x9b2J");  // U+009B, the 8-bit CSI
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");          // an overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("\xe2\x9c") == "\\xe2\\x9c");           // a character cut short
}

TEST_CASE("long text is cut at the limit, never inside an escape or a character, and its length is said") {
  CHECK(printable(std::string(500, 'a')) == std::string(200, 'a') + "... (500 bytes)");
  CHECK(printable(std::string(150, '\n')) == [] {
    std::string s;
    for (int i = 0; i < 100; ++i) s += "\\n";
    return s + "... (150 bytes)";
  }());
  CHECK(printable("ab\n", 3) == "ab... (3 bytes)");
  CHECK(printable("aé", 2) == "a... (3 bytes)");
  CHECK(printable("abc", 3) == "abc");
}

TEST_CASE("whatever the bytes, what printable gives has no control character, C1 control or invalid UTF-8") {
  // Every byte pair, and each after a lead byte of a longer sequence: what a terminal could act on.
  const auto clean = [](const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c == 0x7F) return false;
      if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;
    }
    return true;
  };
  std::vector<std::string> unclean;
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      for (const char* lead : {"", "\xe2", "\xf0\x9f"}) {
        const std::string in = std::string(lead) + static_cast<char>(a) + static_cast<char>(b);
        const std::string out = printable(in);
        if (!clean(out)) unclean.push_back(out);
      }
    }
  }
  CHECK(unclean.empty());
}
