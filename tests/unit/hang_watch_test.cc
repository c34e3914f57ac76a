#include <catch2/catch.hpp>

#include "launcher/hang_watch.h"
#include "launcher/hang_watcher.h"

using namespace dtl::launcher;
using namespace std::chrono_literals;

namespace {

const HangClock::time_point t0{};

/// Two ranks sampled every second from t0 to `until` seconds: rank 0 uses `cpu0` of a CPU, rank 1
/// `cpu1`; neither prints after t0. Returns the hangs reported, by the second they came.
std::vector<std::pair<int, Hang>> watch(HangWatch& w, int from, int until, double cpu0, double cpu1,
                                        HangClock::time_point last_output = t0) {
  std::vector<std::pair<int, Hang>> hangs;
  for (int s = from; s <= until; ++s) {
    std::vector<RankSample> ranks{{0, 0, 100, cpu0 > 0.5 ? 'R' : 'S', cpu0 * s, last_output},
                                  {1, 1, 101, cpu1 > 0.5 ? 'R' : 'S', cpu1 * s, last_output}};
    if (auto h = w.on_sample(t0 + std::chrono::seconds(s), ranks)) hangs.emplace_back(s, *h);
  }
  return hangs;
}

}  // namespace

TEST_CASE("hang watch: ranks that compute quietly are never hung") {
  HangWatch w(10s);
  CHECK(watch(w, 0, 60, 1.0, 0.9).empty());
}

TEST_CASE("hang watch: ranks computing on a machine shared three ways are still busy") {
  HangWatch w(10s);
  CHECK(watch(w, 0, 60, 0.33, 0.3).empty());
}

TEST_CASE("hang watch: no rank printing and none making progress is a hang, reported once") {
  HangWatch w(10s);
  auto hangs = watch(w, 0, 40, 0.0, 0.0);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].first == 10);
  CHECK(hangs[0].second.quiet_s == Approx(10));
  REQUIRE(hangs[0].second.ranks.size() == 2);
  CHECK_FALSE(hangs[0].second.ranks[0].busy);
  CHECK(hangs[0].second.ranks[1].pid == 101);
}

TEST_CASE("hang watch: one rank spinning while the other waits is a hang, the spinner busy") {
  HangWatch w(10s);
  auto hangs = watch(w, 0, 20, 0.01, 1.0);
  REQUIRE(hangs.size() == 1);
  CHECK_FALSE(hangs[0].second.ranks[0].busy);
  CHECK(hangs[0].second.ranks[1].busy);
  CHECK(hangs[0].second.ranks[1].cpu_percent == Approx(100));
}

TEST_CASE("hang watch: output ends a hang, and a later silence is a new one") {
  HangWatch w(5s);
  CHECK(watch(w, 0, 10, 0, 0).size() == 1);
  // a rank printed at second 11: silence counts from there
  auto later = watch(w, 11, 30, 0, 0, t0 + 11s);
  REQUIRE(later.size() == 1);
  CHECK(later[0].first == 16);
}

TEST_CASE("hang watch: the CPU window needs watching first; a reset forgets the attempt") {
  HangWatch w(10s);
  // quiet since long before the watch began: the first ten seconds of samples tell nothing yet
  std::vector<RankSample> ranks{{0, 0, 100, 'S', 0, t0}};
  CHECK_FALSE(w.on_sample(t0 + 100s, ranks));
  CHECK_FALSE(w.on_sample(t0 + 105s, ranks));
  CHECK(w.on_sample(t0 + 110s, ranks));
  w.reset();
  CHECK_FALSE(w.on_sample(t0 + 111s, ranks));
}

TEST_CASE("hang watch: what a stack says a rank does") {
  CHECK(classify({"thread MainThread (7)", "all_reduce (torch/distributed/distributed_c10d.py:2950)",
                  "wrapper (torch/distributed/c10d_logger.py:81)", "main (train.py:20)"}) == "in a collective");
  CHECK(classify({"thread MainThread (7)", "wait (threading.py:320)", "get (queue.py:180)",
                  "_get_data (torch/utils/data/dataloader.py:1285)", "main (train.py:9)"}) == "in a data loader");
  CHECK(classify({"thread MainThread (7)", "get (torch/distributed/elastic/utils/store.py:30)"}) == "in the store");
  CHECK(classify({"thread MainThread (7)", "stuck (hang.py:7)", "main (hang.py:12)"}).empty());
  // a script's own file names say nothing, whatever they are called
  CHECK(classify({"thread MainThread (7)", "stuck_in_data_loader (nccl_hang.py:42)", "<module> (nccl_hang.py:51)"})
            .empty());
  CHECK(classify({"thread MainThread (7)", "restore (my_store.py:3)", "main (processgroup_test.py:9)"}).empty());
  // the main thread speaks for the rank, whatever the others do
  CHECK(classify({"thread pin_memory (8)", "all_reduce (torch/distributed/distributed_c10d.py:1)", "",
                  "thread MainThread (7)", "stuck (hang.py:7)"})
            .empty());
  // native frames (eu-stack)
  CHECK(classify({"thread 7", "__futex_abstimed_wait_common", "gloo::transport::tcp::UnboundBuffer::waitRecv"}) ==
        "in a collective");
  // py-spy --native on a rank whose NCCL collective never ends: it spins in .item()'s synchronisation
  CHECK(classify({"thread MainThread", "clock_gettime (libc.so.6:0)", "0x7fa4526cc5c4 (libcuda.so.580.159.04:0)",
                  "cuStreamSynchronize (libcuda.so.580.159.04:0)", "cudaStreamSynchronize (libcudart.so.13:0)",
                  "at::native::_local_scalar_dense_cuda (libtorch_cuda.so:0)",
                  "torch::autograd::THPVariable_item (libtorch_python.so:0)", "<module> (nccl_hang.py:52)"}) ==
        "waiting for the GPU");
  CHECK(classify({"thread MainThread", "cudaDeviceSynchronize (libcudart.so.13:0)",
                  "synchronize (torch/cuda/__init__.py:1)"}) == "waiting for the GPU");
}

TEST_CASE("hang watch: a rank waiting for the GPU is no suspect, though it spins") {
  // The NCCL hang on an H200: rank 0 spins at 200 % in cuStreamSynchronize behind its all_reduce,
  // rank 1 sleeps in its own function. Python frames alone made rank 0 the suspect.
  Hang h{11, {}, ""};
  HungRank waiting{
      0,
      0,
      513,
      'R',
      200,
      11,
      true,
      "",
      {"thread MainThread", "<module> (nccl_hang.py:52)"},
      "",
      {"thread MainThread", "cuStreamSynchronize (libcuda.so.580.159.04:0)", "<module> (nccl_hang.py:52)"}};
  HungRank sleeping{1, 1, 514, 'S', 0, 11, false, "", {"thread MainThread", "stuck_in_data_loader (nccl_hang.py:41)"},
                    ""};
  h.ranks = {waiting, sleeping};
  CHECK(find_suspect(h) == 1u);
  CHECK(h.ranks[0].doing == "waiting for the GPU");
  CHECK(h.ranks[1].doing == "blocked");
  // without the native frames it looks like a rank computing while the other waits
  h.ranks[0].native.clear();
  CHECK(find_suspect(h) == 0u);
}

TEST_CASE("hang watch: a signalled hang is reported at once, once an attempt, and silences the silence rule") {
  HangWatch w(10s);
  // every rank busy: the silence rule never fires
  CHECK(watch(w, 0, 20, 1.0, 2.0).empty());
  std::vector<RankSample> ranks{{0, 0, 100, 'R', 21.0, t0}, {1, 1, 101, 'R', 42.0, t0}};
  auto h = w.on_signal(t0 + 21s, ranks, "rank 0's NCCL watchdog timed out a collective");
  REQUIRE(h);
  CHECK(h->cause == "rank 0's NCCL watchdog timed out a collective");
  REQUIRE(h->ranks.size() == 2);
  CHECK(h->ranks[1].busy);
  CHECK(h->ranks[1].cpu_percent == Approx(200));
  CHECK(h->quiet_s == Approx(21));
  CHECK_FALSE(w.on_signal(t0 + 22s, ranks, "again"));
  // the ranks' own reports of the timeout are output, not the end of the hang
  CHECK(watch(w, 22, 60, 0.0, 0.0, t0 + 22s).empty());
  w.reset();
  CHECK(w.on_signal(t0 + 61s, ranks, "a new attempt's"));
  const auto text = hang_report(*h, std::nullopt, "node-a", "py-spy", 10);
  CHECK(text.starts_with("dtlaunch: hang: rank 0's NCCL watchdog timed out a collective\n"));
}

TEST_CASE("hang watch: exception_dump's value names the rank whose watchdog fired") {
  CHECK(nccl_timeout_cause(std::string("\x03\0\0\0", 4)) ==
        "rank 3's NCCL watchdog timed out a collective (exception_dump in the store)");
  CHECK(nccl_timeout_cause("12").starts_with("rank 12's"));
  CHECK(nccl_timeout_cause("").starts_with("a rank's"));
  CHECK(nccl_timeout_cause("not a rank").starts_with("a rank's"));
}

TEST_CASE("hang watch: the suspect is the rank not waiting with the others, a spinning one first") {
  Hang h{12, {}};
  HungRank waiting{0,     0,  100,
                   'S',   0,  12,
                   false, "", {"thread MainThread (100)", "all_reduce (torch/distributed/distributed_c10d.py:1)"},
                   ""};
  HungRank sleeping{1, 1, 101, 'S', 0, 12, false, "", {"thread MainThread (101)", "stuck (hang.py:7)"}, ""};
  h.ranks = {waiting, sleeping};
  auto s = find_suspect(h);
  REQUIRE(s);
  CHECK(*s == 1);
  CHECK(h.ranks[0].doing == "in a collective");
  CHECK(h.ranks[1].doing == "blocked");

  HungRank spinning = sleeping;
  spinning.rank = 2;
  spinning.busy = true;
  spinning.cpu_percent = 99;
  h.ranks = {waiting, sleeping, spinning};
  CHECK(find_suspect(h) == 2u);
  CHECK(h.ranks[2].doing == "running");

  // without stacks an idle rank may be waiting like the others: no suspect
  HungRank unknown = sleeping;
  unknown.stack.clear();
  h.ranks = {waiting, unknown};
  CHECK_FALSE(find_suspect(h));
}

TEST_CASE("hang watch: py-spy's JSON and eu-stack's lines become stacks") {
  const std::string json = R"([{"pid": 7, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 7,
    "active": false, "owns_gil": false, "frames": [
      {"name": "stuck", "filename": "/w/hang.py", "module": null, "short_filename": "hang.py", "line": 4},
      {"name": "<module>", "filename": "/w/hang.py", "module": null, "short_filename": "hang.py", "line": 9}]},
    {"pid": 7, "thread_id": 2, "thread_name": "Thread-1", "os_thread_id": 8, "frames": [
      {"name": "run", "filename": "/usr/lib/python3.11/threading.py", "line": 975}]}])";
  auto stack = parse_py_spy(json);
  REQUIRE(stack);
  CHECK(*stack == std::vector<std::string>{"thread MainThread", "stuck (hang.py:4)", "<module> (hang.py:9)", "",
                                           "thread Thread-1", "run (/usr/lib/python3.11/threading.py:975)"});
  CHECK_FALSE(parse_py_spy("Error: Permission denied (os error 13)"));
  CHECK(parse_eu_stack({"PID 7 - process", "TID 7:", "#0  0x00007f0c1b2e5d3a __clock_nanosleep",
                        "#1  0x0000000000401136 main", "TID 8:", "#0  0x00007f0c1b2e5d3a poll - 1"}) ==
        std::vector<std::string>{"thread 1", "__clock_nanosleep", "main", "", "thread 2", "poll - 1"});
}

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

TEST_CASE("hang watch: faulthandler's dump becomes a stack, the signalled thread the main one") {
  const std::string dump = R"(Thread 0x00007f2a6bfff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/v/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py", line 52 in _pin_memory_loop

Current thread 0x00007f2a7d1b8740 (most recent call first):
  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2950 in all_reduce
  File "/work/job/train.py", line 20 in main
  File "/work/job/train.py", line 31 in <module>
)";
  const auto stack = parse_faulthandler(dump);
  CHECK(stack == std::vector<std::string>{"thread 1", "wait (threading.py:324)",
                                          "_pin_memory_loop (torch/utils/data/_utils/pin_memory.py:52)", "",
                                          "thread MainThread",
                                          "all_reduce (torch/distributed/distributed_c10d.py:2950)",
                                          "main (train.py:20)", "<module> (train.py:31)"});
  CHECK(classify(stack) == "in a collective");
  CHECK(parse_faulthandler("").empty());
  CHECK(parse_faulthandler("  File \"x.py\", line 1 in f\n").empty());  // no thread line: not a dump
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
