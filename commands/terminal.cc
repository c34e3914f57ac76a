#include "commands/terminal.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "base/posix.h"

namespace dtl::commands {
namespace {

// A signal that ends dtlaunch while the terminal is raw must leave it as it found it: the handler
// needs the saved settings, so they live here, set only while a ConsoleTerminal holds raw mode.
int g_raw_fd = -1;
termios g_saved{};
constexpr int kRestoreSignals[] = {SIGTERM, SIGHUP, SIGQUIT, SIGINT, SIGPIPE};  // SIGPIPE: `dtlaunch config | head`
constexpr int kSignals = sizeof kRestoreSignals / sizeof kRestoreSignals[0];
struct sigaction g_previous[kSignals];

void restore_and_reraise(int sig) {
  if (g_raw_fd >= 0) tcsetattr(g_raw_fd, TCSANOW, &g_saved);
  signal(sig, SIG_DFL);
  raise(sig);
}

size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void pop_char(std::string& s) {
  while (!s.empty()) {
    unsigned char c = static_cast<unsigned char>(s.back());
    s.pop_back();
    if ((c & 0xC0) != 0x80) break;
  }
}

std::string pad(const std::string& s, size_t width) { return s + std::string(width > columns(s) ? width - columns(s) : 0, ' '); }

}  // namespace

ConsoleTerminal::ConsoleTerminal(int in_fd, int out_fd, const std::string& term) : in_(in_fd), out_(out_fd) {
  if (!isatty(in_) || tcgetattr(in_, &saved_) != 0) return;
  termios raw = saved_;
  raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG | IEXTEN);
  raw.c_iflag &= ~static_cast<tcflag_t>(IXON | ICRNL | INLCR | ISTRIP);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  g_raw_fd = in_;
  g_saved = saved_;
  struct sigaction sa {};
  sa.sa_handler = restore_and_reraise;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kSignals; ++i) sigaction(kRestoreSignals[i], &sa, &g_previous[i]);
  if (tcsetattr(in_, TCSANOW, &raw) != 0) {
    for (int i = 0; i < kSignals; ++i) sigaction(kRestoreSignals[i], &g_previous[i], nullptr);
    g_raw_fd = -1;
    return;
  }
  raw_ = true;
  arrows_ = isatty(out_) && !term.empty() && term != "dumb";
}

ConsoleTerminal::~ConsoleTerminal() {
  if (!raw_) return;
  tcsetattr(in_, TCSANOW, &saved_);
  for (int i = 0; i < kSignals; ++i) sigaction(kRestoreSignals[i], &g_previous[i], nullptr);
  g_raw_fd = -1;
}

void ConsoleTerminal::write(const std::string& text) { posix::write_all(out_, text); }

KeyDecoder::Key KeyDecoder::feed(unsigned char c, std::string& text) {
  if (state_ == State::escape) {
    if (c == '[' || c == 'O') {
      state_ = State::csi;
      length_ = 0;
      return Key::none;
    }
    state_ = State::ground;
    if (c >= 0x20 && c != 0x7f) return Key::other;  // Alt and a key
  } else if (state_ == State::csi) {
    if (c >= 0x40 && c <= 0x7e) {
      state_ = State::ground;
      return c == 'A' ? Key::up : c == 'B' ? Key::down : Key::other;
    }
    if (c >= 0x20 && c < 0x40 && ++length_ <= 16) return Key::none;  // parameters, as in ESC [ 1 ; 5 A
    state_ = State::ground;
    if (c >= 0x20 && c != 0x7f && c < 0x80) return Key::other;  // a sequence too long to be one
  }
  switch (c) {
    case 3: return Key::interrupt;
    case 4: return Key::eof;
    case '\r':
    case '\n': return Key::enter;
    case 8:
    case 127: return Key::backspace;
    case 21: return Key::erase_line;
    case 27: state_ = State::escape; return Key::none;
    default:
      if (c < 32) return Key::other;
      text = std::string(1, static_cast<char>(c));
      return Key::text;
  }
}

KeyDecoder::Key KeyDecoder::timeout() {
  if (state_ == State::ground) return Key::none;
  state_ = State::ground;
  return Key::other;
}

ConsoleTerminal::Key ConsoleTerminal::read_key(std::string& text) {
  while (true) {
    // The bytes of an escape sequence arrive at once; a lone Escape key (or Alt+[) is followed by nothing.
    pollfd p{in_, POLLIN, 0};
    if (keys_.in_sequence() && poll(&p, 1, 50) <= 0) return keys_.timeout();
    unsigned char c = 0;
    if (posix::read_some(in_, &c, 1) <= 0) return Key::eof;
    if (Key key = keys_.feed(c, text); key != Key::none) return key;
  }
}

bool ConsoleTerminal::edit(Key key, const std::string& text, std::string& line) {
  if (key == Key::text) {
    line += text;
    write(text);
    return true;
  }
  if (key != Key::backspace) return false;
  if (!line.empty()) {
    pop_char(line);
    write("\b \b");
  }
  return true;
}

config::Reply ConsoleTerminal::read_line_raw(const std::string& prompt) {
  write(prompt);
  std::string line;
  while (true) {
    std::string t;
    const Key key = read_key(t);
    if (edit(key, t, line)) continue;
    switch (key) {
      case Key::erase_line:
        for (size_t i = columns(line); i > 0; --i) write("\b \b");
        line.clear();
        break;
      case Key::enter: write("\n"); return {config::Reply::Kind::answer, line};
      case Key::interrupt: write("^C\n"); return {config::Reply::Kind::interrupt, ""};
      case Key::eof:
        if (!line.empty()) break;  // Ctrl-D ends the input only on an empty line
        write("\n");
        return {config::Reply::Kind::eof, ""};
      default: break;
    }
  }
}

config::Reply ConsoleTerminal::read_line_cooked() {
  while (pending_.find('\n') == std::string::npos && !input_closed_) {
    char buf[4096];
    long n = posix::read_some(in_, buf, sizeof buf);
    if (n <= 0) {
      input_closed_ = true;
      break;
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
  auto nl = pending_.find('\n');
  if (nl == std::string::npos && pending_.empty()) {
    write("\n");
    return {config::Reply::Kind::eof, ""};
  }
  std::string line = pending_.substr(0, nl);
  pending_.erase(0, nl == std::string::npos ? nl : nl + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  write(line + "\n");  // the answer, so that a piped session reads like a typed one
  return {config::Reply::Kind::answer, line};
}

config::Reply ConsoleTerminal::ask(const std::string& prompt) {
  if (raw_) return read_line_raw(prompt);
  write(prompt);
  return read_line_cooked();
}

void ConsoleTerminal::draw_menu(const std::vector<config::Choice>& options, int selected, const std::string& typed,
                                bool redraw) {
  size_t width = 0;
  for (const auto& o : options) width = std::max(width, columns(o.name));
  std::string out;
  if (redraw) out += "\r\x1b[" + std::to_string(options.size()) + "A";
  for (size_t i = 0; i < options.size(); ++i) {
    const bool on = static_cast<int>(i) == selected;
    out += "\x1b[2K" + std::string(on ? "  > \x1b[7m" : "    ") + pad(options[i].name, width) + (on ? "\x1b[0m" : "") +
           "  " + options[i].description + "\n";
  }
  out += "\x1b[2K  answer: " + typed;
  write(out);
}

config::Reply ConsoleTerminal::choose(const std::string& question, const std::vector<config::Choice>& options,
                                      int initial) {
  if (!arrows_) {
    size_t width = 0;
    for (const auto& o : options) width = std::max(width, columns(o.name));
    std::string menu = question + "\n";
    for (size_t i = 0; i < options.size(); ++i) {
      menu += "  " + std::to_string(i + 1) + ") " + pad(options[i].name, width) + "  " + options[i].description + "\n";
    }
    return ask(menu + "Type a number or a name [" + options[initial].name + "]: ");
  }
  write(question + "  (arrow keys and Enter, or type a number or a name)\n");
  int selected = initial;
  std::string typed;
  draw_menu(options, selected, typed, false);
  const int n = static_cast<int>(options.size());
  auto finish = [&](const std::string& shown) {
    write("\r\x1b[" + std::to_string(n) + "A\x1b[J  > " + shown + "\n");
  };
  while (true) {
    std::string t;
    const Key key = read_key(t);
    if (edit(key, t, typed)) continue;
    switch (key) {
      case Key::up:
      case Key::down:
        selected = (selected + (key == Key::up ? n - 1 : 1)) % n;
        typed.clear();
        draw_menu(options, selected, typed, true);
        break;
      case Key::erase_line:
        typed.clear();
        draw_menu(options, selected, typed, true);
        break;
      case Key::enter: {
        std::string reply = typed.empty() ? options[selected].name : typed;
        finish(reply);
        return {config::Reply::Kind::answer, reply};
      }
      case Key::interrupt: finish("^C"); return {config::Reply::Kind::interrupt, ""};
      case Key::eof:
        if (!typed.empty()) break;
        finish("(end of input)");
        return {config::Reply::Kind::eof, ""};
      default: break;
    }
  }
}

}  // namespace dtl::commands
