#include <catch2/catch.hpp>

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

  // too big for the budget: the main threads only, then fewer frames
  const auto cut = parse_hang_part(hang_part(b, "node-b", "py-spy", part.size() - 10));
  REQUIRE(cut);
  CHECK(cut->ranks[1].stack ==
        std::vector<std::string>{"thread MainThread", "all_reduce (torch/distributed/distributed_c10d.py:1)"});
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
