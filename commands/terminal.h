// The real terminal behind the wizard: arrow-key menus in raw mode when stdin and stdout are a
// terminal that is not dumb, typed numbers or names everywhere else (pipes, TERM=dumb).
#pragma once

#include <termios.h>

#include <string>

#include "config/wizard.h"

namespace dtl::commands {

/// The keys the wizard reads, from the bytes a terminal sends, one at a time: pure, so that tests
/// feed it bytes. An escape sequence (ESC [ ... final byte) is one key; a control character inside
/// one ends it and counts as itself, so that Ctrl-C and Ctrl-D work whatever came before (Alt+[
/// sends ESC [ and nothing more).
class KeyDecoder {
 public:
  enum class Key { none, text, enter, up, down, backspace, erase_line, interrupt, eof, other };
  /// The key byte `c` completes (a typed character goes to `text`), or none inside a sequence.
  Key feed(unsigned char c, std::string& text);
  /// No byte came in time: an unfinished sequence is dropped (a lone Escape key, Alt+[).
  Key timeout();
  bool in_sequence() const { return state_ != State::ground; }

 private:
  enum class State { ground, escape, csi } state_ = State::ground;
  int length_ = 0;  ///< bytes of the sequence's parameters so far
};

class ConsoleTerminal : public config::Terminal {
 public:
  /// `term`: $TERM. Raw mode, when used, lasts as long as this object (and is undone on SIGTERM,
  /// SIGHUP, SIGQUIT, SIGINT and SIGPIPE too).
  ConsoleTerminal(int in_fd, int out_fd, const std::string& term);
  ~ConsoleTerminal() override;
  ConsoleTerminal(const ConsoleTerminal&) = delete;
  ConsoleTerminal& operator=(const ConsoleTerminal&) = delete;

  void write(const std::string& text) override;
  config::Reply ask(const std::string& prompt) override;
  config::Reply choose(const std::string& question, const std::vector<config::Choice>& options, int initial) override;

 private:
  using Key = KeyDecoder::Key;
  Key read_key(std::string& text);
  /// A typed character or a backspace applied to `line` and echoed; false for any other key.
  bool edit(Key key, const std::string& text, std::string& line);
  config::Reply read_line_raw(const std::string& prompt);
  config::Reply read_line_cooked();
  void draw_menu(const std::vector<config::Choice>& options, int selected, const std::string& typed, bool redraw);

  int in_ = 0;
  int out_ = 1;
  bool raw_ = false;     ///< stdin is a terminal in raw mode: dtlaunch edits the line itself
  bool arrows_ = false;  ///< menus move with the arrow keys
  termios saved_{};
  std::string pending_;  ///< bytes read from a pipe past the current line
  bool input_closed_ = false;
  KeyDecoder keys_;
};

}  // namespace dtl::commands
