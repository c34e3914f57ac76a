#include "launcher/line_prefixer.h"

#include <cstring>

namespace dtl::launcher {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line)
    : prefix_(std::move(prefix)), max_line_(max_line) {}

void LinePrefixer::feed(std::string_view chunk, std::string& out) {
  // A '\r' held back at the end of the last chunk ended a progress update unless '\n' follows.
  if (!partial_.empty() && partial_.back() == '\r' && !chunk.empty() && chunk.front() != '\n') finish(out);
  while (!chunk.empty()) {
    size_t end = chunk.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      size_t room = max_line_ - partial_.size();
      if (chunk.size() < room) {
        partial_.append(chunk);
        return;
      }
      partial_.append(chunk.substr(0, room));
      chunk.remove_prefix(room);
      finish(out);
      continue;
    }
    size_t len = end + 1;
    if (chunk[end] == '\r') {
      if (end + 1 == chunk.size()) {  // "\r\n" may be split across reads: wait for the next one
        partial_.append(chunk);
        return;
      }
      if (chunk[end + 1] == '\n') len = end + 2;
      if (len == 1 && partial_.empty()) {  // nothing to show before this '\r'
        chunk.remove_prefix(1);
        continue;
      }
    }
    out.append(prefix_);
    if (!partial_.empty()) {
      out.append(partial_);
      partial_.clear();
    }
    out.append(chunk.data(), len);
    chunk.remove_prefix(len);
  }
}

void LinePrefixer::finish(std::string& out) {
  if (partial_.empty()) return;
  out.append(prefix_).append(partial_);
  if (partial_.back() != '\r') out.push_back('\n');
  partial_.clear();
}

std::string expand_prefix(const std::string& tmpl, const std::string& role, int local_rank, int rank,
                          const std::string& hostname) {
  const std::pair<std::string, std::string> vars[] = {{"${role_name}", role},
                                                      {"${local_rank}", std::to_string(local_rank)},
                                                      {"${rank}", std::to_string(rank)},
                                                      {"${hostname}", hostname}};
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    bool replaced = false;
    for (const auto& [key, value] : vars) {
      if (tmpl.compare(i, key.size(), key) == 0) {
        out += value;
        i += key.size();
        replaced = true;
        break;
      }
    }
    if (!replaced) out += tmpl[i++];
  }
  return out;
}

}  // namespace dtl::launcher
