// A load tool for the rendezvous: N real dtl::rendezvous::Client connections from ONE process and
// ONE io_context, against a running server (`dtlaunch rdzv-server --nnodes N --rdzv_backend c10d`).
// Each client is a node with host "load-<i>", nproc 1, --nnodes N:N. It measures the time from the
// first connect until every client has its Round, checks the round (group ranks and base ranks
// exactly 0..N-1, world size N, one master: the node ranked first), then has every client send Done
// and measures the time until every client has its Exit with code 0.
//
//   rdzv_load --port P --nodes N [--host 127.0.0.1] [--run_id none] [--batch 256] [--gap_ms 2]
//             [--timeout_s 120] [--hold] [--static]
//
// --hold: once every Round is in, print "holding" and wait for a line on stdin before sending Done
// (heartbeats keep flowing meanwhile), so that a benchmark can sample the server's memory with
// every node connected. --static: node ranks 0..N-1, for a `--rdzv_backend static` server. Output: "rdzv_load: key=value ..." lines. Exit 0 when every check passed,
// 1 when one failed (or the timeout passed), 2 on bad arguments.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/client.h"

namespace asio = boost::asio;
namespace rdzv = dtl::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

struct Node {
  std::unique_ptr<rdzv::Client> client;
  std::optional<rdzv::Round> round;
  std::optional<rdzv::Exit> exit;
  int worker_port = 0;
};

struct Load {
  asio::io_context io;
  asio::steady_timer batch_timer{io};
  asio::steady_timer deadline{io};
  std::optional<asio::posix::stream_descriptor> input;
  std::array<char, 256> input_buf{};

  std::string host = "127.0.0.1";
  int port = 0;
  std::string run_id = "none";
  int nodes = 0;
  int batch = 256;
  int gap_ms = 2;
  int timeout_s = 120;
  bool hold = false;
  bool static_backend = false;  ///< node_rank i for load-<i> (a `--rdzv_backend static` server)

  std::vector<Node> n;
  int started = 0, rounds = 0, exits = 0;
  Clock::time_point t0, t_rounds, t_done_sent, t_exits;
  std::vector<std::string> errors;
  bool failed = false;

  void error(const std::string& what) {
    if (errors.size() < 10) errors.push_back(what);
    failed = true;
  }

  void finish() {
    for (auto& node : n) node.client->close();
    batch_timer.cancel();
    deadline.cancel();
    if (input) {
      boost::system::error_code ignored;
      input->close(ignored);
    }
    io.stop();
  }

  void start_batch() {
    const int end = std::min(nodes, started + batch);
    for (; started < end; ++started) n[started].client->start();
    if (started < nodes) {
      batch_timer.expires_after(std::chrono::milliseconds(gap_ms));
      batch_timer.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) start_batch();
      });
    }
  }

  void on_round(int i, const rdzv::Round& r) {
    if (n[i].round) return error("load-" + std::to_string(i) + " got a second Round (round " + std::to_string(r.round) + ")");
    n[i].round = r;
    if (++rounds < nodes) return;
    t_rounds = Clock::now();
    check_rounds();
    std::printf("rdzv_load: nodes=%d round_ms=%.1f checks=%s\n", nodes, ms_since(t0, t_rounds), failed ? "FAIL" : "ok");
    std::fflush(stdout);
    if (failed) return finish();
    if (!hold) return send_done();
    std::printf("rdzv_load: holding; a line on stdin sends Done\n");
    std::fflush(stdout);
    input.emplace(io, ::dup(STDIN_FILENO));
    input->async_read_some(asio::buffer(input_buf), [this](const boost::system::error_code&, size_t) { send_done(); });
  }

  void check_rounds() {
    std::vector<int> group_ranks, base_ranks;
    const rdzv::Round& first = *n[0].round;
    int master_port = -1;
    for (int i = 0; i < nodes; ++i) {
      const rdzv::Round& r = *n[i].round;
      group_ranks.push_back(r.group_rank);
      base_ranks.push_back(r.base_rank);
      if (r.world_size != nodes) error("load-" + std::to_string(i) + ": world size " + std::to_string(r.world_size));
      if (r.group_world_size != nodes) {
        error("load-" + std::to_string(i) + ": group world size " + std::to_string(r.group_world_size));
      }
      if (r.master_addr != first.master_addr || r.master_port != first.master_port || r.round != first.round) {
        error("load-" + std::to_string(i) + ": master " + r.master_addr + ":" + std::to_string(r.master_port) +
              " round " + std::to_string(r.round) + ", load-0 has " + first.master_addr + ":" +
              std::to_string(first.master_port) + " round " + std::to_string(first.round));
      }
      if (r.base_rank != r.group_rank) {  // nproc 1 everywhere
        error("load-" + std::to_string(i) + ": base rank " + std::to_string(r.base_rank) + " for group rank " +
              std::to_string(r.group_rank));
      }
      if (r.group_rank == 0) master_port = n[i].worker_port;
    }
    std::sort(group_ranks.begin(), group_ranks.end());
    std::sort(base_ranks.begin(), base_ranks.end());
    for (int i = 0; i < nodes; ++i) {
      if (group_ranks[i] != i) {
        error("group ranks are not exactly 0.." + std::to_string(nodes - 1) + " (sorted position " + std::to_string(i) +
              " holds " + std::to_string(group_ranks[i]) + ")");
        break;
      }
    }
    for (int i = 0; i < nodes; ++i) {
      if (base_ranks[i] != i) {
        error("base ranks are not exactly 0.." + std::to_string(nodes - 1));
        break;
      }
    }
    if (first.master_port != master_port) {
      error("the master port " + std::to_string(first.master_port) + " is not the worker port of group rank 0 (" +
            std::to_string(master_port) + ")");
    }
    if (first.master_addr != host && host == "127.0.0.1") error("master address " + first.master_addr);
  }

  void send_done() {
    t_done_sent = Clock::now();
    for (auto& node : n) node.client->send(rdzv::Done{});
  }

  void on_exit(int i, const rdzv::Exit& e) {
    n[i].exit = e;
    if (e.code != 0) error("load-" + std::to_string(i) + ": Exit code " + std::to_string(e.code) + ": " + e.reason);
    if (++exits < nodes) return;
    t_exits = Clock::now();
    std::printf("rdzv_load: nodes=%d exit_ms=%.1f total_ms=%.1f\n", nodes, ms_since(t_done_sent, t_exits),
                ms_since(t0, t_exits));
    finish();
  }

  int run() {
    n.resize(nodes);
    for (int i = 0; i < nodes; ++i) {
      rdzv::ClientOptions o;
      o.host = host;
      o.port = port;
      o.credentials.run_id = run_id;
      o.connect_timeout = std::chrono::milliseconds(timeout_s * 1000LL);
      // Heartbeat interval and misses: the defaults, as an agent has them.
      o.join.host = "load-" + std::to_string(i);
      o.join.nproc = 1;
      o.join.node_rank = static_backend ? i : -1;
      o.join.min_nodes = o.join.max_nodes = nodes;
      o.join.agent_id = 0x10ad000000000000ull + static_cast<uint64_t>(i);
      o.join.worker_port = n[i].worker_port = 20000 + i % 40000;
      n[i].client = std::make_unique<rdzv::Client>(
          io, o,
          rdzv::Client::Callbacks{
              [this, i](const rdzv::Round& r) { on_round(i, r); },
              [this, i](const rdzv::Stop& s) { error("load-" + std::to_string(i) + ": Stop: " + s.reason); },
              [this, i](const rdzv::Exit& e) { on_exit(i, e); },
              [this, i](const std::string& why, bool refused) {
                error("load-" + std::to_string(i) + (refused ? ": refused: " : ": ") + why);
                finish();
              },
              {}, {}, {}, {}});  // no stacks or hang verdicts in a load test
    }
    deadline.expires_after(std::chrono::seconds(timeout_s));
    deadline.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      error("timed out after " + std::to_string(timeout_s) + " s: " + std::to_string(started) + " started, " +
            std::to_string(rounds) + " rounds, " + std::to_string(exits) + " exits of " + std::to_string(nodes));
      finish();
    });
    t0 = Clock::now();
    start_batch();
    io.run();
    if (exits < nodes && !failed) error("only " + std::to_string(exits) + " of " + std::to_string(nodes) + " exits");
    for (const auto& e : errors) std::fprintf(stderr, "rdzv_load: error: %s\n", e.c_str());
    std::fflush(stdout);
    return failed ? 1 : 0;
  }
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "rdzv_load: %s\nusage: rdzv_load --port P --nodes N [--host H] [--run_id ID] [--batch B] [--gap_ms MS] "
               "[--timeout_s S] [--hold] [--static]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Load load;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    auto number = [&]() {
      std::string v = value();
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || x < 0 || x > 1000000) usage((a + ": not a count: " + v).c_str());
      return static_cast<int>(x);
    };
    if (a == "--host") load.host = value();
    else if (a == "--port") load.port = number();
    else if (a == "--run_id") load.run_id = value();
    else if (a == "--nodes") load.nodes = number();
    else if (a == "--batch") load.batch = number();
    else if (a == "--gap_ms") load.gap_ms = number();
    else if (a == "--timeout_s") load.timeout_s = number();
    else if (a == "--hold") load.hold = true;
    else if (a == "--static") load.static_backend = true;
    else usage(("unknown argument " + a).c_str());
  }
  if (load.port < 1 || load.port > 65535) usage("--port is required (1..65535)");
  if (load.nodes < 1) usage("--nodes is required (at least 1)");
  if (load.batch < 1) usage("--batch must be at least 1");
  if (load.timeout_s < 1) usage("--timeout_s must be at least 1");

  // One descriptor per client: thousands of nodes need more than the usual soft limit.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
      files.rlim_cur < static_cast<rlim_t>(load.nodes) + 64) {
    std::fprintf(stderr, "rdzv_load: error: %d clients need more descriptors than RLIMIT_NOFILE allows (%llu)\n",
                 load.nodes, static_cast<unsigned long long>(files.rlim_cur));
    return 1;
  }
  return load.run();
}
