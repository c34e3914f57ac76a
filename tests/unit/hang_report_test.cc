#include <catch2/catch.hpp>

#include <set>

#include "watch/hang_report.h"
#include "watch/stacks.h"

using namespace dtl::watch;

TEST_CASE("hang watch: the report groups ranks with one stack and ends with the verdict") {
  Hang h{12, {}};
  const std::vector<std::string> in_all_reduce{
      "thread MainThread (1)", "all_reduce (torch/distributed/distributed_c10d.py:2950)", "main (hang.py:12)"};
  for (int r : {0, 2, 3}) h.ranks.push_back({r, r, 100 + r, 'S', 0.0, 12, false, "", in_all_reduce, ""});
  h.ranks.insert(h.ranks.begin() + 1, HungRank{1,
                                               1,
                                               101,
                                               'S',
                                               0.0,
                                               12,
                                               false,
                                               "",
                                               {"thread MainThread (101)", "stuck (hang.py:7)", "main (hang.py:11)"},
                                               ""});
  const auto suspect = find_suspect(h);
  const auto text = hang_report(h, suspect, "node-a", "py-spy", 10);
  CHECK(text.starts_with("dtlaunch: hang: no rank printed for 12 s (--hang_timeout=10), and no rank made progress\n"));
  CHECK(text.find("  ranks 0,2-3:\n    thread MainThread (1)\n      all_reduce "
                  "(torch/distributed/distributed_c10d.py:2950)\n") != std::string::npos);
  CHECK(text.find("  rank 1:\n    thread MainThread (101)\n      stuck (hang.py:7)\n") != std::string::npos);
  CHECK(text.ends_with("dtlaunch: suspect rank 1 on node-a (pid 101): stuck (hang.py:7)\n"));
  const auto json = hang_report_json(h, suspect, "node-a", "py-spy", 10);
  CHECK(json.find("\"suspect\": 1, ") != std::string::npos);
  CHECK(json.find("\"doing\": \"in a collective\"") != std::string::npos);
}

TEST_CASE("hang watch: a node's part goes to the host and back, cut to fit, and the parts merge by rank") {
  Hang b{7, {}, ""};
  b.ranks.push_back({3, 1, 301, 'S', 0.5, 7, false, "blocked", {"thread MainThread", "stuck (hang.py:9)"}, ""});
  b.ranks.push_back({2,
                     0,
                     300,
                     'S',
                     0.1,
                     8,
                     false,
                     "in a collective",
                     {"thread Thread-1", "run (threading.py:1)", "", "thread MainThread",
                      "all_reduce (torch/distributed/distributed_c10d.py:1)"},
                     ""});
  const auto part = hang_part(b, "node-b", "py-spy", 1 << 16);
  auto back = parse_hang_part(part);
  REQUIRE(back);
  REQUIRE(back->ranks.size() == 2);
  CHECK(back->ranks[0].host == "node-b");
  CHECK(back->ranks[0].doing == "blocked");
  CHECK(back->ranks[1].stack == b.ranks[1].stack);
  CHECK(back->quiet_s == Approx(7));

  // too big for the budget: the main threads only, then fewer frames, and the cut says so
  const auto cut = parse_hang_part(hang_part(b, "node-b", "py-spy", part.size() - 10));
  REQUIRE(cut);
  CHECK(cut->ranks[1].stack == std::vector<std::string>{"thread MainThread",
                                                        "all_reduce (torch/distributed/distributed_c10d.py:1)",
                                                        "(1 other thread left out to fit)"});
  CHECK(cut->ranks[0].stack == std::vector<std::string>{"thread MainThread", "stuck (hang.py:9)"});  // nothing cut
  CHECK_FALSE(parse_hang_part("not json"));
  CHECK_FALSE(parse_hang_part("[1, 2]"));

  Hang a{9, {}, "rank 0's NCCL watchdog timed out a collective"};
  a.ranks.push_back({0, 0, 100, 'S', 0, 9, false, "in a collective", {"thread MainThread", "all_reduce (x.py:1)"}, ""});
  a.ranks[0].host = "node-a";
  const Hang all = merge_parts({*back, a});
  CHECK(all.quiet_s == Approx(7));
  CHECK(all.cause == "rank 0's NCCL watchdog timed out a collective");
  REQUIRE(all.ranks.size() == 3);
  CHECK(all.ranks[0].rank == 0);
  CHECK(all.ranks[2].rank == 3);
  const auto suspect = choose_suspect(all);
  REQUIRE(suspect);
  CHECK(all.ranks[*suspect].rank == 3);
  const auto text = hang_report(all, suspect, "node-a", "py-spy", 10);
  CHECK(text.find("  3      node-b ") != std::string::npos);
  CHECK(text.ends_with("dtlaunch: suspect rank 3 on node-b (pid 301): stuck (hang.py:9)\n"));
}

TEST_CASE("hang watch: a part cut to fewer frames says how many threads and frames it left out") {
  Hang h{7, {}, ""};
  std::vector<std::string> stack{"thread MainThread"};
  for (int i = 0; i < 30; ++i) stack.push_back("f" + std::to_string(i) + " (a.py:1)");
  for (const char* t : {"thread Thread-1", "thread Thread-2"})
    stack.insert(stack.end(), {"", t, "run (threading.py:1)"});
  h.ranks.push_back({0, 0, 100, 'S', 0, 7, false, "blocked", stack, ""});
  const auto whole = hang_part(h, "node-b", "py-spy", 1 << 16);
  CHECK(parse_hang_part(whole)->ranks[0].stack == stack);
  // Every smaller budget: the notes each cut ends with.
  std::set<std::string> notes;
  for (size_t budget = whole.size() - 1; budget > 200; budget -= 5) {
    auto cut = parse_hang_part(hang_part(h, "node-b", "py-spy", budget));
    REQUIRE(cut);
    if (!cut->ranks[0].stack.empty()) notes.insert(cut->ranks[0].stack.back());
  }
  CHECK(notes == std::set<std::string>{"(2 other threads left out to fit)",
                                       "(2 other threads and 10 more frames left out to fit)",
                                       "(2 other threads and 25 more frames left out to fit)",
                                       "(2 other threads and 29 more frames left out to fit)"});
  auto cut = parse_hang_part(hang_part(h, "node-b", "py-spy", whole.size() - 1));
  CHECK(stacks_text(*cut, "node-a", "py-spy").find("      f29 (a.py:1)\n      (2 other threads left out") !=
        std::string::npos);
}

TEST_CASE("hang watch: what ranks and other nodes name reaches the terminal printable, and the JSON keeps it") {
  // A thread named with a screen clear and a carriage return that would forge a line of dtlaunch's,
  // a file name with an OSC sequence, a host name and a cause from another node's part.
  Hang h{3.6, {}, ""};
  h.ranks.push_back({0,
                     0,
                     100,
                     'S',
                     0,
                     3.6,
                     false,
                     "",
                     {"thread \x1b[2J\rdtlaunch: all is well", "stuck (evil\x1b]0;owned\x07.py:3)"},
                     ""});
  h.ranks[0].host = "node-b\x1b[31m";
  // beside a rank seen waiting, the rank stuck in its own code is the suspect
  h.ranks.push_back({1,
                     1,
                     101,
                     'S',
                     0,
                     3.6,
                     false,
                     "",
                     {"thread MainThread", "all_reduce (torch/distributed/distributed_c10d.py:1)"},
                     ""});
  const auto suspect = find_suspect(h);
  const auto text = hang_report(h, suspect, "node-a", "py-spy", 3);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK(text.find("    thread \\x1b[2J\\rdtlaunch: all is well\n") != std::string::npos);
  CHECK(text.find("      stuck (evil\\x1b]0;owned\\x07.py:3)\n") != std::string::npos);
  CHECK(text.ends_with("dtlaunch: suspect rank 0 on node-b\\x1b[31m (pid 100): stuck (evil\\x1b]0;owned\\x07.py:3)\n"));
  // every line of it is dtlaunch's own: none starts with text a rank chose
  size_t lines = 0;
  for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    ++lines;
    CHECK((text.compare(at, 10, "dtlaunch: ") == 0 || text.compare(at, 2, "  ") == 0));
  }
  CHECK(lines > 3);
  // the JSON escapes as JSON does, so a reader gets the names as they were
  const auto json = hang_report_json(h, suspect, "node-a", "py-spy", 3);
  CHECK(json.find("\"thread \\u001b[2J\\u000ddtlaunch: all is well\"") != std::string::npos);
  auto back = parse_hang_part(hang_part(h, "node-b", "py-spy", 1 << 16));
  REQUIRE(back);
  CHECK(back->ranks[0].stack == h.ranks[0].stack);

  h.cause = "rank 9's \x1b[2Jwatchdog";
  CHECK(hang_report(h, suspect, "node-a", "py-spy", 3).starts_with("dtlaunch: hang: rank 9's \\x1b[2Jwatchdog\n"));
  CHECK(hang_failure(h, nullptr) == "hang: rank 9's \\x1b[2Jwatchdog (no suspect: the lowest rank stands for the job)");
}

TEST_CASE("hang watch: the report's headline and the failure summary say the same number of seconds") {
  Hang h{3.6, {}, ""};
  h.ranks.push_back({1, 1, 101, 'S', 0, 3.6, false, "", {"thread MainThread", "stuck (hang.py:7)"}, ""});
  h.ranks.push_back({2,
                     2,
                     102,
                     'S',
                     0,
                     3.6,
                     false,
                     "",
                     {"thread MainThread", "all_reduce (torch/distributed/distributed_c10d.py:1)"},
                     ""});
  const auto suspect = find_suspect(h);
  REQUIRE(suspect);
  CHECK(hang_report(h, suspect, "node-a", "py-spy", 3).starts_with("dtlaunch: hang: no rank printed for 4 s "));
  CHECK(hang_failure(h, &h.ranks[*suspect]) == "hang: no rank printed for 4 s (suspect: blocked)");
}
