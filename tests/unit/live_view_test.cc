#include <catch2/catch.hpp>

#include "commands/top_screen.h"
#include "node/proc_stat.h"
#include "watch/job_figures.h"
#include "watch/metrics.h"
#include "watch/rank_sampler.h"

using namespace dtl;
using namespace dtl::watch;
using namespace std::chrono_literals;

namespace {

HangClock::time_point at(int ms) { return HangClock::time_point(std::chrono::milliseconds(ms)); }

JobFigures two_ranks() {
  JobFigures job;
  job.run_id = "run \"7\"";
  job.world_size = 4;
  job.nodes = 2;
  job.attempt = 1;
  job.max_restarts = 3;
  job.uptime_s = 3725;
  RankFigures a;
  a.rank = 0;
  a.local_rank = 0;
  a.host = "node-a";
  a.pid = 4242;
  a.state = 'R';
  a.doing = "running";
  a.cpu_percent = 99.5;
  a.cpu_s = 12.25;
  a.rss_bytes = 1536ull << 20;
  a.gpu = GpuFigures{3, "GPU-abc", "NVIDIA H200", false, 87, 70ull << 30, 141ull << 30};
  a.restarts = 1;
  a.quiet_s = 2.5;
  RankFigures b = a;
  b.rank = 1;
  b.local_rank = 1;
  b.pid = 4243;
  b.state = 'D';
  b.doing = "blocked in the kernel (D)";
  b.cpu_percent.reset();
  b.gpu = GpuFigures{1, "GPU-fake0000-0000-0000-0000-000000000001", "fake GPU", true};
  b.quiet_s = 130;
  job.ranks = {a, b};
  return job;
}

}  // namespace

TEST_CASE("/proc/PID/stat's resident pages are read with its CPU ticks") {
  const auto s = node::parse_proc_stat(
      "4242 (py (x)) R 1 4242 4240 0 -1 4194560 10 0 0 0 250 31 4 5 20 0 5 0 123456 987654321 3210 "
      "18446744073709551615");
  REQUIRE(s);
  CHECK(s->cpu_ticks == 281u);
  CHECK(s->rss_pages == 3210u);
  CHECK_FALSE(node::parse_proc_stat("77 (cut) S 1 2 3 0 -1 0 0 0 0 0 1 1")->rss_pages);
}

TEST_CASE("a rank's CPU share comes from its last two samples, and one sample is no share yet") {
  RankSampler s;
  s.record(7, at(0), {'R', 1.0, 100});
  auto first = s.latest(7, at(0), 1500ms);
  REQUIRE(first);
  CHECK_FALSE(first->cpu_percent);
  s.record(7, at(1000), {'R', 1.5, 200});
  auto second = s.latest(7, at(1000), 1500ms);
  REQUIRE(second);
  CHECK(*second->cpu_percent == Approx(50));
  CHECK(second->rss_bytes == 200);
  SECTION("a sample too soon after another updates state and memory, and keeps the share") {
    s.record(7, at(1050), {'S', 1.55, 300});
    auto soon = s.latest(7, at(1050), 1500ms);
    CHECK(*soon->cpu_percent == Approx(50));
    CHECK(soon->state == 'S');
    CHECK(soon->rss_bytes == 300);
    s.record(7, at(2000), {'R', 2.5, 300});
    CHECK(*s.latest(7, at(2000), 1500ms)->cpu_percent == Approx(100));  // from the sample at 1000
  }
  SECTION("an old sample is not the newest figure") {
    CHECK_FALSE(s.latest(7, at(2600), 1500ms));
    s.keep_only({8});
    CHECK_FALSE(s.latest(7, at(1000), 1500ms));
  }
}

TEST_CASE("what a rank is doing by /proc is the hang watch's words") {
  CHECK(doing_from_proc(95, 'R') == "running");
  CHECK(doing_from_proc(20, 'S') == "running");
  CHECK(doing_from_proc(3, 'S') == "blocked");
  CHECK(doing_from_proc(90, 'D') == "blocked in the kernel (D)");
}

TEST_CASE("a node's figures go through JSON and back as they were") {
  const JobFigures job = two_ranks();
  const auto back = parse_figures(figures_json(job));
  REQUIRE(back);
  CHECK(back->run_id == job.run_id);
  CHECK(back->restarts_left() == 2);
  REQUIRE(back->ranks.size() == 2);
  const auto& a = back->ranks[0];
  CHECK(a.host == "node-a");
  CHECK(a.pid == 4242);
  CHECK(a.state == 'R');
  CHECK(*a.cpu_percent == Approx(99.5));
  CHECK(a.rss_bytes == 1536ull << 20);
  CHECK(a.gpu->uuid == "GPU-abc");
  CHECK(*a.gpu->util_percent == Approx(87));
  CHECK(*a.gpu->memory_used_bytes == 70ull << 30);
  CHECK_FALSE(a.slow);
  const auto& b = back->ranks[1];
  CHECK_FALSE(b.cpu_percent);
  CHECK(b.gpu->fake);
  CHECK_FALSE(b.gpu->util_percent);
  CHECK(b.doing == "blocked in the kernel (D)");
  CHECK(figures_json(job).find(R"("slow": false)") != std::string::npos);
  CHECK_FALSE(parse_figures("dtlaunch: no rank runs now"));
  CHECK_FALSE(parse_figures(R"({"ranks": 3})"));
}

TEST_CASE("every node's figures merge into the job's, by rank, naming the nodes that sent none") {
  JobFigures a = two_ranks(), b = two_ranks();
  a.ranks[0].rank = 2;
  a.ranks[1].rank = 3;
  a.uptime_s = 10;
  b.uptime_s = 12;
  const auto job = merge_figures({a, b}, "node-c (10.0.0.3)");
  REQUIRE(job.ranks.size() == 4);
  CHECK(job.ranks[0].rank == 0);
  CHECK(job.ranks[3].rank == 3);
  CHECK(job.uptime_s == 12);
  CHECK(job.missing == "node-c (10.0.0.3)");
}

TEST_CASE("the metrics page has a series per rank with its labels, base units and counters in _total") {
  JobFigures job = two_ranks();
  job.ranks[1].slow = true;
  const std::string page = prometheus_text(job);
  CHECK(page.find("# TYPE dtlaunch_rank_cpu_seconds_total counter\n") != std::string::npos);
  CHECK(
      page.find(R"(dtlaunch_rank_cpu_seconds_total{rank="0",local_rank="0",host="node-a",run_id="run \"7\""} 12.25)") !=
      std::string::npos);
  CHECK(
      page.find(
          R"(dtlaunch_rank_resident_memory_bytes{rank="1",local_rank="1",host="node-a",run_id="run \"7\""} 1610612736)") !=
      std::string::npos);
  CHECK(
      page.find(
          R"(dtlaunch_rank_state{rank="1",local_rank="1",host="node-a",run_id="run \"7\"",state="blocked_in_kernel"} 1)") !=
      std::string::npos);
  CHECK(page.find(
            R"(dtlaunch_rank_last_output_age_seconds{rank="1",local_rank="1",host="node-a",run_id="run \"7\""} 130)") !=
        std::string::npos);
  CHECK(page.find(R"(dtlaunch_rank_slow{rank="1",local_rank="1",host="node-a",run_id="run \"7\""} 1)") !=
        std::string::npos);
  CHECK(page.find(R"(dtlaunch_rank_slow{rank="0",local_rank="0",host="node-a",run_id="run \"7\""} 0)") !=
        std::string::npos);
  // the DCGM exporter's names and labels, plus the rank; a fake GPU has no series
  CHECK(page.find(R"(DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-abc",device="nvidia3",Hostname="node-a",rank="0",)") !=
        std::string::npos);
  CHECK(page.find(R"(DCGM_FI_DEV_FB_USED{gpu="3",)") != std::string::npos);
  CHECK(page.find("} 71680\n") != std::string::npos);  // 70 GiB in MiB
  CHECK(page.find("GPU-fake") == std::string::npos);
  CHECK(page.find("dtlaunch_job_restarts_total{run_id=\"run \\\"7\\\"\"} 1\n") != std::string::npos);
}

TEST_CASE("a job without GPUs has no GPU families at all") {
  JobFigures job = two_ranks();
  for (auto& r : job.ranks) r.gpu.reset();
  CHECK(prometheus_text(job).find("DCGM") == std::string::npos);
}

TEST_CASE("top's screen fits 80 columns, with a header and a row per rank") {
  JobFigures job = two_ranks();
  job.ranks[0].host = "a-very-long-host-name.cluster.example.com";
  job.ranks[1].slow = true;
  const auto lines = commands::top_lines(job, 80);
  for (const auto& l : lines) CHECK(l.size() <= 80);
  CHECK(lines[0] == "world 4   nodes 2   attempt 1   restarts left 2   up 1:02:05   run run \"7\"");
  CHECK(lines[1] == "ranks 2 (1 blocked in the kernel (D), 1 running)   cpu 100%   rss 3.0G");
  CHECK(lines[3] == " RANK HOST           PID DOING           CPU%    RSS  GPU GPU%   GMEM RST  QUIET");
  CHECK(lines[4] == "    0 a-very-lo~    4242 running         99.5   1.5G    3   87    70G   1     2s");
  CHECK(lines[5] == "   1* node-a        4243 blocked (D)        -   1.5G fake    -      -   1     2m");
  const auto wide = commands::top_lines(job, 120);
  CHECK(wide[4].find(" a-very-long-host-name.cluster~ ") != std::string::npos);
  CHECK(wide[5].find("blocked in the kernel (D)") != std::string::npos);
}

TEST_CASE("sizes and silences read short") {
  CHECK(commands::human_bytes(512 * 1024) == "512K");
  CHECK(commands::human_bytes(1536 * 1024) == "1.5M");
  CHECK(commands::human_bytes(350ull << 20) == "350M");
  CHECK(commands::human_bytes(12ull << 30) == "12G");
  CHECK(commands::short_seconds(42.7) == "42s");
  CHECK(commands::short_seconds(1000) == "16m");
  CHECK(commands::short_seconds(7200) == "2h");
}
