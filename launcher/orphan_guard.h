// PR_SET_PDEATHSIG takes the workers down with a SIGKILLed dtlaunch, but not the processes they
// started. The guard is a tiny process forked at start that holds the other end of a pipe: when
// dtlaunch dies, the pipe closes and the guard SIGKILLs every worker process group still listed.
#pragma once

#include <sys/types.h>

#include <string>

namespace dtl::launcher {

class OrphanGuard {
 public:
  /// Forks the guard. Throws std::system_error.
  OrphanGuard();
  /// Lets the guard go (it kills nothing still listed: call forget first) and reaps it.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  /// A worker's process group to kill should dtlaunch die.
  void watch(pid_t pgid);
  /// That group is gone: do not kill it (its number may be reused).
  void forget(pid_t pgid);
  /// A directory to remove should dtlaunch die (empty: none).
  void remove_on_death(const std::string& dir);

  pid_t pid() const { return pid_; }

 private:
  void send(char op, pid_t pgid);
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace dtl::launcher
