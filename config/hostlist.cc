#include "config/hostlist.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <stdexcept>

namespace dtl::config {
namespace {

/// Slurm refuses larger ranges ("Too many hosts in range").
constexpr uint64_t kMaxRange = 65536;

[[noreturn]] void bad(const std::string& item, const std::string& why) {
  throw std::invalid_argument("hostlist item '" + item + "': " + why);
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/// One bound of a range: its digits (kept for their width) and value.
uint64_t bound(const std::string& item, const std::string& digits) {
  if (digits.empty() || digits.size() > 18) bad(item, "expected a number of 1 to 18 digits, got '" + digits + "'");
  uint64_t v = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) bad(item, "expected digits in a range, got '" + digits + "'");
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

/// The numbers of one bracket group's text ("01-03,07"), as text, padded to each low bound's width.
std::vector<std::string> expand_group(const std::string& item, const std::string& group) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = group.find(',', start);
    const std::string part = group.substr(start, comma == std::string::npos ? comma : comma - start);
    const size_t dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const uint64_t lo = bound(item, lo_text);
    const uint64_t hi = dash == std::string::npos ? lo : bound(item, part.substr(dash + 1));
    if (hi < lo) bad(item, "range '" + part + "' goes down");
    if (hi - lo >= kMaxRange) bad(item, "range '" + part + "' has more than 65536 hosts");
    if (out.size() + (hi - lo) >= kMaxRange) bad(item, "more than 65536 hosts, dtlaunch's limit");
    for (uint64_t v = lo; v <= hi; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo_text.size()) n.insert(0, lo_text.size() - n.size(), '0');
      out.push_back(std::move(n));
    }
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

/// One item ("rack[1-2]-n[01-02]"): text and bracket groups. scontrol's order, measured on Slurm
/// 22.05: the last group changes fastest, then the first, the second, ... (a[1-2]b[3-4]c[5-6]: a1b3c5
/// a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...); with two groups that is the plain nested order.
void expand_item(const std::string& item, std::vector<std::string>& out) {
  std::vector<std::string> texts;                 // the text before each group
  std::vector<std::vector<std::string>> groups;   // each group's numbers
  size_t pos = 0;
  while (pos < item.size()) {
    const size_t open = item.find_first_of("[]", pos);
    if (open != std::string::npos && item[open] == ']') bad(item, "']' without '['");
    if (open == std::string::npos) {
      if (pos > 0) bad(item, "text after the last ']' ('" + item.substr(pos) + "'), which Slurm refuses");
      out.push_back(item);
      return;
    }
    const size_t close = item.find_first_of("[]", open + 1);
    if (close == std::string::npos || item[close] != ']') bad(item, "'[' without its ']'");
    texts.push_back(item.substr(pos, open - pos));
    groups.push_back(expand_group(item, item.substr(open + 1, close - open - 1)));
    pos = close + 1;
  }
  uint64_t total = 1;
  for (const auto& g : groups) {
    total *= g.size();
    if (total > kMaxRange) bad(item, "more than 65536 hosts, dtlaunch's limit");
  }
  std::vector<size_t> order{groups.size() - 1};  // fastest first
  for (size_t g = 0; g + 1 < groups.size(); ++g) order.push_back(g);
  std::vector<size_t> at(groups.size(), 0);
  for (uint64_t n = 0; n < total; ++n) {
    std::string name;
    for (size_t g = 0; g < groups.size(); ++g) name += texts[g] + groups[g][at[g]];
    out.push_back(std::move(name));
    for (size_t g : order) {
      if (++at[g] < groups[g].size()) break;
      at[g] = 0;
    }
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expression, size_t enough) {
  std::vector<std::string> hosts;
  std::string item;
  int depth = 0;
  for (char c : expression) {
    if ((c == ',' || is_blank(c)) && depth == 0) {
      if (!item.empty()) expand_item(item, hosts);
      if (hosts.size() > kMaxRange) bad(item, "more than 65536 hosts in all, dtlaunch's limit");
      if (hosts.size() >= enough) return hosts;
      item.clear();
      continue;
    }
    if (is_blank(c)) bad(item + c, "a blank inside '[...]'");
    if (c == '[' && ++depth > 1) bad(item + c, "'[' inside '[...]'");
    if (c == ']') depth = std::max(depth - 1, 0);
    item += c;
  }
  if (depth > 0) bad(item, "'[' without its ']'");
  if (!item.empty()) expand_item(item, hosts);
  if (hosts.size() > kMaxRange) bad(item, "more than 65536 hosts in all, dtlaunch's limit");
  return hosts;
}

}  // namespace dtl::config
