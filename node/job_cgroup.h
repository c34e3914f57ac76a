// The job's cgroup v2: the workers and everything they start, whatever process group or session it
// moves to, are killed as one by writing "1" to cgroup.kill (Linux 5.14+). Optional: where dtlaunch
// may not create one (no cgroup2 mount, no write access, no cgroup.kill), the orphan guard falls back
// to the workers' process groups and sessions.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dtl::node {

/// This process's cgroup v2 directory ("/sys/fs/cgroup/user.slice/x"), from the texts of
/// /proc/self/mountinfo and /proc/self/cgroup ("0::/user.slice/x"); nullopt where no cgroup2
/// hierarchy holding it is mounted.
std::optional<std::string> own_cgroup_dir(std::string_view mountinfo, std::string_view self_cgroup);

/// How many names make_job_cgroup_dir tries.
inline constexpr int kJobCgroupNames = 16;

/// Makes `<parent>/dtlaunch-<pid>` and returns it. Where that name is taken (pids are reused, and a
/// dtlaunch killed together with its orphan guard leaves its cgroup behind), an empty cgroup of that
/// name is removed and made anew; one still populated is left, and `dtlaunch-<pid>.1`, `.2`, ... are
/// tried. nullopt with the reason in `why` where none can be made.
std::optional<std::string> make_job_cgroup_dir(const std::string& parent, pid_t pid, std::string& why);

class JobCgroup {
 public:
  /// Creates `<this process's cgroup>/dtlaunch-<pid>` (make_job_cgroup_dir); nullptr with the reason
  /// in `why` where it cannot.
  static std::unique_ptr<JobCgroup> create(std::string& why);
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  const std::string& path() const { return path_; }
  /// The cgroup's directory, for clone3's CLONE_INTO_CGROUP.
  int dir_fd() const { return dir_fd_; }
  /// Open for writing: a child that could not be cloned into the cgroup writes "0" here to move in.
  int procs_fd() const { return procs_fd_; }
 private:
  JobCgroup(std::string path, int dir_fd, int procs_fd) : path_(std::move(path)), dir_fd_(dir_fd), procs_fd_(procs_fd) {}
  std::string path_;
  int dir_fd_ = -1;
  int procs_fd_ = -1;
};

/// Kills whatever is in the cgroup at `path`, waits up to `wait` for it to empty, and removes it.
/// For the orphan guard, which has only the path. False if it is still there.
bool remove_cgroup(const std::string& path, std::chrono::milliseconds wait);

}  // namespace dtl::node
