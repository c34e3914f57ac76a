// PR_SET_PDEATHSIG takes the workers down with a SIGKILLed dtlaunch, but not the processes they
// started. The guard is a tiny process forked at start that holds the other end of a pipe: when
// dtlaunch dies, the pipe closes and the guard kills the job's cgroup (every descendant, whatever
// its process group or session), or, without one, every worker's process group and every process
// still in a worker's session. It lives in a session of its own, so that a SIGKILL sent to
// dtlaunch's process group (`timeout -s KILL`, `kill -9 -PGID`, a CI runner) does not take it too.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "node/job_cgroup.h"

namespace dtl::node {

class OrphanGuard {
 public:
  /// With `use_cgroup`, first creates the job's cgroup (why it could not: `cgroup_note`). Then forks
  /// the guard. Throws std::system_error.
  explicit OrphanGuard(bool use_cgroup = false);
  /// Lets the guard go (it kills nothing still listed: call forget first), reaps it, and removes
  /// the cgroup.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  /// A worker, leader of its own session and process group, to kill with all its session should
  /// dtlaunch die.
  void watch(pid_t worker);
  /// That worker is gone: do not kill its group (its number may be reused).
  void forget(pid_t worker);
  /// A directory to remove should dtlaunch die (empty: none).
  void remove_on_death(const std::string& dir);

  pid_t pid() const { return pid_; }
  /// The job's cgroup, which workers join before exec; nullptr without one.
  const JobCgroup* cgroup() const { return cgroup_.get(); }
  const std::string& cgroup_note() const { return cgroup_note_; }

 private:
  void send(char op, pid_t pgid);
  std::unique_ptr<JobCgroup> cgroup_;
  std::string cgroup_note_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

/// The session id in the text of /proc/PID/stat, whose second field (the command name) may hold
/// spaces and parentheses.
std::optional<pid_t> stat_session(std::string_view stat);

}  // namespace dtl::node
