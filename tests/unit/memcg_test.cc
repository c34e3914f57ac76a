#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "node/memcg.h"

using namespace dtl::node;
namespace fs = std::filesystem;

namespace {

const char* kHybridMounts =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

struct FakeSys {
  FakeSys() : root(fs::temp_directory_path() / ("memcg-test-" + std::to_string(::getpid()))) {}
  ~FakeSys() { fs::remove_all(root); }
  fs::path root;
};

}  // namespace

TEST_CASE("memory cgroup: v1's memory hierarchy where it is mounted, v2's where it has the controller") {
  const auto v1 = memory_cgroup_of("4:memory:/job/rank\n0::/\n", kHybridMounts);
  CHECK(v1.dir == "/sys/fs/cgroup/memory/job/rank");
  CHECK_FALSE(v1.v2);
  // a namespace whose mount root is below the hierarchy's: paths are from that root
  const auto ns =
      memory_cgroup_of("4:memory:/pod1/job\n", "35 31 0:32 /pod1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  CHECK(ns.dir == "/sys/fs/cgroup/memory/job");
  FakeSys sys;
  write(sys.root / "sys/fs/cgroup/job/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
  const auto v2 = memory_cgroup_of("0::/job\n", "29 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", sys.root);
  CHECK(v2.dir == (sys.root / "sys/fs/cgroup/job").string());
  CHECK(v2.v2);
  CHECK(oom_kills(v2) == 1u);
  // v2 without the memory controller there counts nothing
  CHECK(memory_cgroup_of("0::/other\n", "29 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", sys.root).dir.empty());
}

TEST_CASE("memory cgroup: the OOM-kill count and the lowest limit above it, v1 and v2") {
  FakeSys sys;
  const auto top = sys.root / "memory/job", leaf = top / "rank";
  write(top / "memory.limit_in_bytes", "419430400\n");
  write(leaf / "memory.limit_in_bytes", "9223372036854771712\n");
  write(leaf / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  const MemoryCgroup v1{leaf.string(), false};
  CHECK(oom_kills(v1) == 2u);
  const auto limit = memory_limit(v1);
  CHECK(limit.bytes == 419430400u);
  CHECK(limit.where == top.string());
  const auto v2top = sys.root / "unified/job", v2leaf = v2top / "rank";
  write(v2top / "memory.max", "max\n");
  write(v2leaf / "memory.max", "1073741824\n");
  const auto limit2 = memory_limit({v2leaf.string(), true});
  CHECK(limit2.bytes == 1073741824u);
  CHECK(limit2.where == v2leaf.string());
  // no limit anywhere: the machine's memory
  const auto none = memory_limit({(sys.root / "nowhere").string(), true});
  CHECK(none.where.empty());
  CHECK(none.bytes > 0);
  CHECK_FALSE(oom_kills({(sys.root / "nowhere").string(), true}));
}

TEST_CASE("memory cgroup: the kernel log names the pid it killed for want of memory") {
  const std::string log =
      "6,1201,5678,-;Memory cgroup out of memory: Killed process 4321 (python3) total-vm:2100000kB\n"
      "6,1202,5679,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task=python3,pid=8765,uid=0\n";
  CHECK(log_says_oom_killed(log, 4321));
  CHECK(log_says_oom_killed(log, 8765));
  CHECK_FALSE(log_says_oom_killed(log, 432));
  CHECK_FALSE(log_says_oom_killed(log, 876));
}

TEST_CASE("memory sizes read as a person writes them") {
  CHECK(format_bytes(400ull << 20) == "400 MiB");
  CHECK(format_bytes(3ull << 29) == "1.5 GiB");
  CHECK(format_bytes(812ull << 10) == "812 KiB");
}
