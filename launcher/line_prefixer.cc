#include "launcher/line_prefixer.h"

#include <cstring>

namespace dtl::launcher {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line)
    : prefix_(std::move(prefix)), max_line_(max_line) {}

void LinePrefixer::feed(std::string_view chunk, std::string& out) {
  while (!chunk.empty()) {
    const void* nl = std::memchr(chunk.data(), '\n', chunk.size());
    if (!nl) {
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
    size_t len = static_cast<const char*>(nl) - chunk.data() + 1;
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
  out.append(prefix_).append(partial_).push_back('\n');
  partial_.clear();
}

std::string expand_prefix(const std::string& tmpl, const std::string& role, int local_rank, int rank) {
  const std::pair<std::string, std::string> vars[] = {
      {"${role_name}", role}, {"${local_rank}", std::to_string(local_rank)}, {"${rank}", std::to_string(rank)}};
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
