#include "watch/traceback.h"

#include <algorithm>

namespace dtl::watch {

namespace {

constexpr size_t kLineCap = 4096;
constexpr size_t kHead = 4096, kTail = 28 * 1024;

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

/// The lines Python prints between the tracebacks of a chain of exceptions.
bool chain_line(std::string_view s) {
  return s.starts_with("During handling of the above exception") ||
         s.starts_with("The above exception was the direct cause");
}

void append(std::string& text, std::string_view line) {
  text.append(line);
  text += '\n';
  if (text.size() > kHead + kTail + 1024) {  // keep the head and the tail, where the exception is
    text = text.substr(0, kHead) + "...\n" + text.substr(text.size() - kTail);
  }
}

}  // namespace

void TracebackCatcher::feed(std::string_view chunk) {
  while (!chunk.empty()) {
    const auto nl = chunk.find('\n');
    const auto piece = chunk.substr(0, nl);
    partial_.append(piece.substr(0, kLineCap > partial_.size() ? kLineCap - partial_.size() : 0));
    if (nl == std::string_view::npos) return;
    line(partial_);
    partial_.clear();
    chunk.remove_prefix(nl + 1);
  }
}

void TracebackCatcher::other_output(std::string_view chunk) {
  if (!std::all_of(chunk.begin(), chunk.end(), [](char c) { return c == '\n' || c == ' ' || c == '\r'; })) reset();
}

void TracebackCatcher::reset() {
  phase_ = Phase::outside;
  chained_ = false;
  text_.clear();
  last_.clear();
}

void TracebackCatcher::line(std::string_view text) {
  // torch 2.x's excepthook leads each line of a rank's traceback with "[rank1]: "
  if (text.starts_with("[rank")) {
    const auto close = text.find("]: ");
    if (close != std::string_view::npos && close > 5 &&
        std::all_of(text.begin() + 5, text.begin() + static_cast<long>(close),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      text.remove_prefix(close + 3);
    }
  }
  if (text.starts_with("Traceback (most recent call last):")) {
    if (!chained_) text_.clear();  // the next traceback of a chain continues the text; any other starts over
    chained_ = false;
    phase_ = Phase::frames;
    last_.clear();
    append(text_, text);
    return;
  }
  switch (phase_) {
    case Phase::outside:
      return;
    case Phase::frames:
      append(text_, text);
      // "  File ...", its code and carets are indented; the exception's line is not
      if (!text.empty() && text.front() != ' ' && text.front() != '\t') {
        phase_ = Phase::exception;
        last_ = text_;
      }
      return;
    case Phase::exception:
      if (blank(text) || chain_line(text) || text.front() == ' ' || text.front() == '\t') {
        append(text_, text);  // the exception's further lines, or the way to the next of a chain
        if (chain_line(text)) chained_ = true;
        if (!blank(text) && !chain_line(text)) last_ = text_;
        return;
      }
      reset();  // something else was printed after it
      return;
  }
}

}  // namespace dtl::watch
