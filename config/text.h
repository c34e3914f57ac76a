// The few string helpers every library here needs.
#pragma once

#include <string>
#include <vector>

namespace dtl::text {

inline std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

/// Splits on `sep`, trimming each item; "" gives one empty item.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.push_back(trim(s.substr(start, pos == std::string::npos ? pos : pos - start)));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

inline std::string join(const std::vector<std::string>& items, const std::string& sep = ",") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

inline std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

}  // namespace dtl::text
