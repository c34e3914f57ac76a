// --dedup_lines: identical lines from several ranks within a short window printed once, led by the
// ranks that said them ("[ranks 0-7]:"), as a pure machine over lines and times. Each rank's lines
// come out in the order it wrote them; lines of different ranks in the order their first copy
// arrived, but for a line that waits for another rank's copy behind that rank's earlier lines.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtl::launcher {

class LineGroups {
 public:
  using Clock = std::chrono::steady_clock;
  /// A line waits at most `window` for the same line from the other ranks; past `max_held` bytes
  /// held, the oldest lines go out at once (a flood cannot grow dtlaunch's memory).
  explicit LineGroups(std::chrono::milliseconds window, size_t max_held = size_t{1} << 20);

  /// `rank` writes to this stream: a line every such rank said goes out without waiting.
  void expect(int rank);
  /// `rank`'s stream ended: lines no longer wait for it. Appends what is ready to `out`.
  void gone(int rank, std::string& out);
  /// One whole line of `rank` (with its '\n' or '\r'); appends what is ready to `out`.
  void add(int rank, std::string_view line, Clock::time_point now, std::string& out);
  /// Appends what is due at `now`; returns when the next line falls due, nullopt when none waits.
  std::optional<Clock::time_point> due(Clock::time_point now, std::string& out);
  /// Appends every held line (the end of the output).
  void flush(std::string& out);

  /// The lead of a line said by `ranks`: "[rank 3]:" or "[ranks 0-2,5]:".
  static std::string label(const std::set<int>& ranks);

 private:
  struct Group {
    std::string line;
    std::set<int> ranks;
    Clock::time_point since;
  };
  using Held = std::list<Group>::iterator;
  /// Sends out groups from the front while `ready` says so.
  template <class Ready>
  void release(std::string& out, Ready ready);
  bool complete(const Group& g) const;
  /// A held copy of `line` that `rank` can join, moved behind the rank's newest held line where it
  /// is in front of it and no rank of it said anything in between; end() when there is none.
  Held joinable(int rank, const std::string& line);

  std::chrono::milliseconds window_;
  size_t max_held_;
  size_t held_ = 0;
  std::set<int> expected_;
  std::list<Group> groups_;                                     ///< in the order they go out
  std::unordered_map<std::string, std::vector<Held>> by_line_;  ///< the held groups of each line
  std::map<int, Held> newest_;                                  ///< each rank's newest held group
};

}  // namespace dtl::launcher
