#include <catch2/catch.hpp>

#include "commands/terminal.h"

using dtl::commands::KeyDecoder;
using Key = KeyDecoder::Key;

namespace {

/// The keys `bytes` give, in order ("none" left out), and what was typed.
std::vector<Key> keys(const std::string& bytes, std::string* typed = nullptr) {
  KeyDecoder d;
  std::vector<Key> out;
  for (unsigned char c : bytes) {
    std::string t;
    Key k = d.feed(c, t);
    if (k == Key::text && typed) *typed += t;
    if (k != Key::none) out.push_back(k);
  }
  return out;
}

}  // namespace

TEST_CASE("arrow keys, Enter, Backspace and typed characters are decoded") {
  std::string typed;
  CHECK(keys("\x1b[A\x1b[B\x1bOA\r\n\x7f\x08\x15", &typed) ==
        std::vector<Key>{Key::up, Key::down, Key::up, Key::enter, Key::enter, Key::backspace, Key::backspace,
                         Key::erase_line});
  CHECK(keys("a2", &typed) == std::vector<Key>{Key::text, Key::text});
  CHECK(typed == "a2");
  CHECK(keys("\x1b[1;5A\x1b[3~") == std::vector<Key>{Key::up, Key::other});  // Ctrl+Up, Delete
}

TEST_CASE("Ctrl-C and Ctrl-D work in the middle of an unfinished escape sequence") {
  // Alt+[ sends ESC [ alone; before, every byte up to a letter was swallowed as part of it.
  CHECK(keys("\x1b[\x03") == std::vector<Key>{Key::interrupt});
  CHECK(keys("\x1b[\x04") == std::vector<Key>{Key::eof});
  CHECK(keys("\x1b[12;\x03") == std::vector<Key>{Key::interrupt});
  CHECK(keys("\x1b\x03") == std::vector<Key>{Key::interrupt});
  CHECK(keys("\x1b[\r") == std::vector<Key>{Key::enter});
  CHECK(keys("\x1b[\x1b[A") == std::vector<Key>{Key::up});  // a new sequence starts over
}

TEST_CASE("a sequence that does not finish in time is dropped, and the next byte is read as itself") {
  KeyDecoder d;
  std::string t;
  CHECK(d.feed(0x1b, t) == Key::none);
  CHECK(d.feed('[', t) == Key::none);
  CHECK(d.in_sequence());
  CHECK(d.timeout() == Key::other);
  CHECK_FALSE(d.in_sequence());
  CHECK(d.feed('A', t) == Key::text);
  CHECK(t == "A");
  CHECK(d.timeout() == Key::none);
}

TEST_CASE("Alt and a key is one other key, and an endless sequence ends") {
  CHECK(keys("\x1bx") == std::vector<Key>{Key::other});
  CHECK(keys("\x1b[" + std::string(16, '1') + "A") == std::vector<Key>{Key::up});
  CHECK(keys("\x1b[" + std::string(40, '1')).size() == 24);  // the 17th parameter byte ends it; the rest are typed
}
