#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "node/job_cgroup.h"
#include "node/orphan_guard.h"
#include "node/proc_stat.h"

using namespace dtl::node;

TEST_CASE("the job's cgroup goes under this process's own, in the cgroup2 mount") {
  const char* v2 = "24 30 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
                   "30 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n";
  CHECK(own_cgroup_dir(v2, "0::/user.slice/user-1000.slice/session-2.scope\n") ==
        "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope");
  CHECK(own_cgroup_dir(v2, "0::/\n") == "/sys/fs/cgroup");
  // a hybrid host: v1 controllers, and the unified hierarchy beside them
  const char* hybrid = "33 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                       "40 25 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
  CHECK(own_cgroup_dir(hybrid, "4:memory:/x\n0::/\n") == "/sys/fs/cgroup/unified");
}

TEST_CASE("a cgroup2 mount of a subtree holds only the cgroups beneath its root") {
  const char* sub = "50 40 0:30 /job\\040one /mnt/cg\\040x rw - cgroup2 cgroup2 rw\n";
  CHECK(own_cgroup_dir(sub, "0::/job one/step\n") == "/mnt/cg x/step");
  CHECK(own_cgroup_dir(sub, "0::/job one\n") == "/mnt/cg x");
  CHECK_FALSE(own_cgroup_dir(sub, "0::/other\n"));
  CHECK_FALSE(own_cgroup_dir(sub, "0::/job oneself\n"));
}

TEST_CASE("no cgroup v2 entry or mount is no job cgroup") {
  CHECK_FALSE(own_cgroup_dir("30 1 254:1 / / rw - ext4 /dev/vda rw\n", "0::/\n"));
  CHECK_FALSE(own_cgroup_dir("24 30 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "1:cpu:/\n"));
  CHECK_FALSE(own_cgroup_dir("", ""));
  CHECK_FALSE(own_cgroup_dir("garbage - cgroup2\n", "0::relative\n"));
}

TEST_CASE("/proc/PID/stat: the state, the session and utime + stime, after the command name") {
  auto s = parse_proc_stat("4242 (py (x)) D 1 4242 4240 0 -1 4194560 10 0 0 0 250 31 0 0 20 0 5 0");
  REQUIRE(s);
  CHECK(s->state == 'D');
  CHECK(s->session == 4240);
  CHECK(s->cpu_ticks == 281u);
  auto cut = parse_proc_stat("77 (cut) S 1 2 3 0");
  REQUIRE(cut);
  CHECK(cut->session == 3);
  CHECK_FALSE(cut->cpu_ticks);
  auto self = read_proc_stat(getpid());
  REQUIRE(self);
  CHECK(self->state == 'R');
  CHECK(self->session == getsid(0));
  CHECK_FALSE(read_proc_stat(0));
}

TEST_CASE("the session is read after the command name, whatever that name holds") {
  CHECK(stat_session("4242 (sleep) S 1 4242 4242 0 -1 4194560 ...") == 4242);
  CHECK(stat_session("77 (a) b) (c) R 1 70 71 0") == 71);
  CHECK(stat_session("77 (with space) S 5 6 7 8") == 7);
  CHECK_FALSE(stat_session("77 (cut) S 1 2"));
  CHECK_FALSE(stat_session("no parenthesis"));
  CHECK_FALSE(stat_session(""));
}

TEST_CASE("a job cgroup's name left by a dead dtlaunch with the same pid is taken over, unless its job runs") {
  namespace fs = std::filesystem;
  const fs::path parent = fs::temp_directory_path() / ("dtl-job-cgroup-test-" + std::to_string(getpid()));
  fs::remove_all(parent);
  fs::create_directories(parent / "dtlaunch-123" / "dtlaunch-456");  // stale, with a nested job's
  std::string why;
  CHECK(make_job_cgroup_dir(parent.string(), 123, why) == (parent / "dtlaunch-123").string());
  CHECK(fs::is_empty(parent / "dtlaunch-123"));

  std::ofstream(parent / "dtlaunch-123" / "cgroup.events") << "populated 1\nfrozen 0\n";  // its job runs
  CHECK(make_job_cgroup_dir(parent.string(), 123, why) == (parent / "dtlaunch-123.1").string());
  CHECK(fs::exists(parent / "dtlaunch-123" / "cgroup.events"));

  for (int n = 1; n < kJobCgroupNames; ++n) {
    const auto taken = parent / ("dtlaunch-7." + std::to_string(n));
    fs::create_directories(taken);
    std::ofstream(taken / "cgroup.events") << "populated 1\n";
  }
  fs::create_directories(parent / "dtlaunch-7");
  std::ofstream(parent / "dtlaunch-7" / "cgroup.events") << "populated 1\n";
  CHECK_FALSE(make_job_cgroup_dir(parent.string(), 7, why));
  CHECK(why == "cannot create " + (parent / "dtlaunch-7").string() +
                   ": it and the next 15 names are cgroups of jobs still running");
  fs::remove_all(parent);
}
