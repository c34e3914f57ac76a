#include <catch2/catch.hpp>

#include "watch/traceback.h"

using namespace dtl::watch;

namespace {

const char* kTraceback =
    "Traceback (most recent call last):\n"
    "  File \"/w/hang.py\", line 10, in <module>\n"
    "    raise RuntimeError(\"rank 1 went wrong\")\n"
    "RuntimeError: rank 1 went wrong\n";

}  // namespace

TEST_CASE("traceback: a traceback that is the rank's last output is caught whole, however it was cut") {
  for (size_t cut : {1ul, 7ul, 40ul, 4096ul}) {
    TracebackCatcher c;
    c.feed("step 2\n");
    const std::string text = kTraceback;
    for (size_t i = 0; i < text.size(); i += cut) c.feed(text.substr(i, cut));
    CHECK(c.last() == text);
  }
}

TEST_CASE("traceback: output after it, on either stream, means the rank went on") {
  TracebackCatcher c;
  c.feed(kTraceback);
  c.feed("\n");  // blank lines change nothing
  CHECK(!c.last().empty());
  c.feed("step 3 after a caught exception\n");
  CHECK(c.last().empty());
  c.feed(kTraceback);
  c.other_output("  \n");
  CHECK(!c.last().empty());
  c.other_output("loss 0.3\n");
  CHECK(c.last().empty());
}

TEST_CASE("traceback: one half printed is not yet a traceback, and a chain is kept as one") {
  TracebackCatcher c;
  c.feed("Traceback (most recent call last):\n  File \"/w/a.py\", line 1, in <module>\n");
  CHECK(c.last().empty());
  c.feed(
      "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
      "Traceback (most recent call last):\n  File \"/w/a.py\", line 3, in <module>\nValueError: y\n");
  CHECK(c.last().starts_with("Traceback (most recent call last):\n  File \"/w/a.py\", line 1"));
  CHECK(c.last().find("KeyError: 'x'\n") != std::string::npos);
  CHECK(c.last().ends_with("ValueError: y\n"));
}

TEST_CASE("traceback: an exception's further indented lines belong to it") {
  TracebackCatcher c;
  c.feed(std::string(kTraceback) + "    while joining ranks\n");
  CHECK(c.last().ends_with("RuntimeError: rank 1 went wrong\n    while joining ranks\n"));
}

TEST_CASE("traceback: a huge one keeps its head and its tail, where the exception is") {
  TracebackCatcher c;
  std::string text = "Traceback (most recent call last):\n";
  for (int i = 0; i < 5000; ++i) text += "  File \"/w/deep.py\", line " + std::to_string(i) + ", in f\n";
  text += "RecursionError: maximum recursion depth exceeded\n";
  c.feed(text);
  CHECK(c.last().size() < 40 * 1024);
  CHECK(c.last().starts_with("Traceback (most recent call last):\n"));
  CHECK(c.last().ends_with("RecursionError: maximum recursion depth exceeded\n"));
}

TEST_CASE("traceback: torch 2.x's [rankN]: before each line is no part of it") {
  TracebackCatcher c;
  c.feed(
      "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/w/hang.py\", line 10, in <module>\n"
      "[rank1]:     raise RuntimeError(\"rank 1 went wrong\")\n[rank1]: RuntimeError: rank 1 went wrong\n");
  CHECK(c.last() == kTraceback);
}
