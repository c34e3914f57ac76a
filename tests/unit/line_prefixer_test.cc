#include <catch2/catch.hpp>

#include "launcher/line_prefixer.h"

using namespace dtl::launcher;

TEST_CASE("whole lines are prefixed; a partial line waits for its end") {
  LinePrefixer p("[default0]:");
  std::string out;
  p.feed("a\nb", out);
  CHECK(out == "[default0]:a\n");
  p.feed("c\n\nd", out);
  CHECK(out == "[default0]:a\n[default0]:bc\n[default0]:\n");
  p.finish(out);
  CHECK(out == "[default0]:a\n[default0]:bc\n[default0]:\n[default0]:d\n");
  out.clear();
  p.finish(out);
  CHECK(out.empty());
}

TEST_CASE("a line longer than the limit is cut, never held without bound") {
  LinePrefixer p("> ", 4);
  std::string out;
  p.feed("abcdefghij", out);
  CHECK(out == "> abcd\n> efgh\n");
  p.feed("\n", out);
  CHECK(out == "> abcd\n> efgh\n> ij\n");
}

TEST_CASE("the prefix template knows role, local rank and rank") {
  CHECK(expand_prefix(kDefaultPrefixTemplate, "default", 3, 7) == "[default3]:");
  CHECK(expand_prefix("${rank}|${local_rank}|${role_name}|${other}", "r", 1, 2) == "2|1|r|${other}");
}

TEST_CASE("a carriage return ends a progress update, so bars show as they advance") {
  LinePrefixer p("[w0]:");
  std::string out;
  p.feed("\r 10%|#", out);
  CHECK(out.empty());
  p.feed("\r 20%|##", out);
  CHECK(out == "[w0]: 10%|#\r");
  p.feed("\r100%|###\n", out);
  CHECK(out == "[w0]: 10%|#\r[w0]: 20%|##\r[w0]:100%|###\n");
}

TEST_CASE("CRLF is one line end, even split across two reads") {
  LinePrefixer p("> ");
  std::string out;
  p.feed("a\r\nb\r", out);
  CHECK(out == "> a\r\n");
  p.feed("\nc\r", out);
  CHECK(out == "> a\r\n> b\r\n");
  p.feed("d", out);
  CHECK(out == "> a\r\n> b\r\n> c\r");
  p.finish(out);
  CHECK(out == "> a\r\n> b\r\n> c\r> d\n");
}
