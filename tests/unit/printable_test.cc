#include "rendezvous/printable.h"

#include <catch2/catch.hpp>

using dtl::rendezvous::printable;

TEST_CASE("a peer's newline and escape sequence are escaped, so it can forge no log line and drive no terminal") {
  CHECK(printable("x\ndtlaunch: info: forged\x1b[2J\r") == "x\\ndtlaunch: info: forged\\e[2J\\r");
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
