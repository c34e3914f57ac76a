#include <catch2/catch.hpp>

#include "watch/hang_report.h"
#include "watch/stacks.h"

using namespace dtl::watch;

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

TEST_CASE("hang watch: py-spy 0.4's threads without a name: the main one by its OS thread id, the others numbered") {
  // `py-spy dump --json` of a Python that never imported `threading`, and of one thread it did not
  // name: thread_name is null. The main thread's os_thread_id is the pid.
  const std::string json = R"([{"pid": 70, "thread_id": 1, "thread_name": null, "os_thread_id": 71, "frames": [
      {"name": "poll", "filename": "/w/io.py", "short_filename": "io.py", "line": 3}]},
    {"pid": 70, "thread_id": 2, "thread_name": null, "os_thread_id": 70, "frames": [
      {"name": "stuck", "filename": "/w/hang.py", "short_filename": "hang.py", "line": 4}]},
    {"pid": 70, "thread_id": 3, "thread_name": "loader", "os_thread_id": 72, "frames": []}])";
  auto stack = parse_py_spy(json);
  REQUIRE(stack);
  CHECK(*stack == std::vector<std::string>{"thread 1", "poll (io.py:3)", "", "thread MainThread", "stuck (hang.py:4)",
                                           "", "thread loader"});
  CHECK(main_thread(*stack) == std::vector<std::string>{"stuck (hang.py:4)"});  // not the first thread's
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

namespace {

HungRank rank_with(int rank, std::vector<std::string> stack, bool busy = false, char state = 'S') {
  HungRank r;
  r.rank = r.local_rank = rank;
  r.pid = 100 + rank;
  r.state = state;
  r.busy = busy;
  r.cpu_percent = busy ? 99 : 0;
  r.stack = std::move(stack);
  return r;
}

/// eu-stack's main thread of a Python rank waiting in all_reduce, as Debian's torch 1.13 shows it.
const std::vector<std::string> kNativeAllReduce{"thread 1",
                                                "__futex_abstimed_wait_common",
                                                "pthread_cond_wait@@GLIBC_2.3.2",
                                                "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
                                                "0x00007f94d75a9b4e",
                                                "_PyEval_EvalFrameDefault",
                                                "Py_RunMain"};

}  // namespace

TEST_CASE("hang stacks: c10d's Work::wait is a collective, in native frames as in Python ones") {
  CHECK(classify(kNativeAllReduce) == "in a collective");
  CHECK(classify({"thread 1", "__poll", "c10d::TCPStore::doWait(c10::ArrayRef<std::string>)"}) == "in the store");
  CHECK(classify({"thread 1", "c10d::ProcessGroupNCCL::WorkNCCL::synchronize()"}) == "in a collective");
  CHECK(classify({"thread 1", "__futex_abstimed_wait_common", "std::condition_variable::wait"}).empty());
}

TEST_CASE("hang stacks: a waiting rank is never the suspect, and where no rank is seen waiting none is named") {
  // dtl-train: rank 0 in Work::wait (native), rank 1 stopped with SIGSTOP
  Hang h;
  h.ranks = {rank_with(0, kNativeAllReduce), rank_with(1, {"thread 1", "__GI___clock_nanosleep"}, false, 'T')};
  CHECK(find_suspect(h) == 1u);
  CHECK(h.ranks[1].doing == "stopped (T)");
  // both blocked where their stacks do not say: no suspect, and why
  Hang unknown;
  unknown.ranks = {rank_with(0, {"thread 1", "__futex_abstimed_wait_common", "my::wait()"}),
                   rank_with(1, {"thread 1", "__GI___clock_nanosleep"})};
  CHECK_FALSE(find_suspect(unknown));
  const auto text = hang_report(unknown, std::nullopt, "node-a", "eu-stack", 10);
  CHECK(
      text.find("dtlaunch: no suspect: no rank is known to be off; ranks 0-1 blocked where their stacks do not say") !=
      std::string::npos);
  // every rank waits
  Hang waiting;
  waiting.ranks = {rank_with(0, kNativeAllReduce), rank_with(1, kNativeAllReduce)};
  CHECK_FALSE(find_suspect(waiting));
  CHECK(hang_report(waiting, std::nullopt, "node-a", "eu-stack", 10)
            .find("dtlaunch: no suspect: every rank waits for the others") != std::string::npos);
  // a busy rank without a stack is named only beside a rank seen waiting
  Hang unread;
  unread.ranks = {rank_with(0, {}), rank_with(1, {}, true)};
  CHECK_FALSE(find_suspect(unread));
  unread.ranks[0] = rank_with(0, kNativeAllReduce);
  CHECK(find_suspect(unread) == 1u);
}

TEST_CASE("hang stacks: a rank alive after its traceback is the suspect, before any other") {
  Hang h;
  h.ranks = {rank_with(0, {}, true), rank_with(1, {"thread 1", "__GI___clock_nanosleep"})};
  h.ranks[1].traceback = "Traceback (most recent call last):\n  File \"hang.py\", line 10\nRuntimeError: rank 1\n";
  CHECK(find_suspect(h) == 1u);
  CHECK(h.ranks[1].doing == "alive after its traceback");
  // it travels in a node's part to the job's report
  auto back = parse_hang_part(hang_part(h, "node-b", "py-spy", 1 << 16));
  REQUIRE(back);
  CHECK(back->ranks[1].traceback == h.ranks[1].traceback);
  CHECK(choose_suspect(*back) == 1u);
}
