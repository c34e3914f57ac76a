#include "launcher/line_groups.h"

#include <algorithm>

#include "base/text.h"

namespace dtl::launcher {

namespace {

/// How far a line looks among the held ones for a copy to join: a flood of distinct lines makes
/// new groups rather than long searches.
constexpr size_t kMaxSteps = 1024;

}  // namespace

LineGroups::LineGroups(std::chrono::milliseconds window, size_t max_held) : window_(window), max_held_(max_held) {}

std::string LineGroups::label(const std::set<int>& ranks) {
  const std::vector<int> sorted(ranks.begin(), ranks.end());
  return (sorted.size() == 1 ? "[rank " : "[ranks ") + text::ranges(sorted) + "]:";
}

void LineGroups::expect(int rank) { expected_.insert(rank); }

void LineGroups::gone(int rank, std::string& out) {
  expected_.erase(rank);
  release(out, [this](const Group& g) { return complete(g); });
}

bool LineGroups::complete(const Group& g) const {
  return std::all_of(expected_.begin(), expected_.end(), [&](int r) { return g.ranks.contains(r); });
}

LineGroups::Held LineGroups::joinable(int rank, const std::string& line) {
  auto copies = by_line_.find(line);
  if (copies == by_line_.end()) return groups_.end();
  const auto newest = newest_.find(rank);
  size_t steps = 0;
  for (Held copy : copies->second) {
    if (copy->ranks.contains(rank)) continue;
    if (newest == newest_.end()) return copy;  // nothing of this rank is held: any copy keeps its order
    const Held mine = newest->second;
    // The copy behind this rank's newest line already?
    bool behind = false;
    for (Held g = std::next(mine); g != groups_.end() && steps < kMaxSteps; ++g, ++steps) {
      if (g == copy) {
        behind = true;
        break;
      }
    }
    if (behind) return copy;
    // In front of it: it may move behind it if none of its ranks said anything in between.
    bool movable = true;
    for (Held g = std::next(copy);; ++g, ++steps) {
      if (g == groups_.end() || steps >= kMaxSteps) {
        movable = false;
        break;
      }
      if (std::any_of(copy->ranks.begin(), copy->ranks.end(), [&](int r) { return g->ranks.contains(r); })) {
        movable = false;
        break;
      }
      if (g == mine) break;
    }
    if (movable) {
      groups_.splice(std::next(mine), groups_, copy);
      return copy;
    }
  }
  return groups_.end();
}

void LineGroups::add(int rank, std::string_view line, Clock::time_point now, std::string& out) {
  std::string text(line);
  Held group = joinable(rank, text);
  if (group == groups_.end()) {
    held_ += text.size();
    group = groups_.insert(groups_.end(), Group{text, {}, now});
    by_line_[std::move(text)].push_back(group);
  }
  group->ranks.insert(rank);
  newest_[rank] = group;
  release(out, [&](const Group& g) { return complete(g) || held_ > max_held_ || g.since + window_ <= now; });
}

std::optional<LineGroups::Clock::time_point> LineGroups::due(Clock::time_point now, std::string& out) {
  release(out, [&](const Group& g) { return complete(g) || g.since + window_ <= now; });
  if (groups_.empty()) return std::nullopt;
  return groups_.front().since + window_;
}

void LineGroups::flush(std::string& out) {
  release(out, [](const Group&) { return true; });
}

template <class Ready>
void LineGroups::release(std::string& out, Ready ready) {
  while (!groups_.empty() && ready(groups_.front())) {
    const Held g = groups_.begin();
    out += label(g->ranks);
    out += g->line;
    held_ -= g->line.size();
    auto copies = by_line_.find(g->line);
    std::erase(copies->second, g);
    if (copies->second.empty()) by_line_.erase(copies);
    for (int r : g->ranks) {
      if (auto n = newest_.find(r); n != newest_.end() && n->second == g) newest_.erase(n);
    }
    groups_.erase(g);
  }
}

}  // namespace dtl::launcher
