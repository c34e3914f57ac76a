// A process's memory cgroup as the kernel keeps it (v1 and v2), and the kernel's own word on who it
// killed for want of memory: the cgroup's OOM-kill count and the kernel log. A rank killed by
// SIGKILL is checked against them, so that "exitcode -9" says why.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtl::node {

struct MemoryCgroup {
  std::string dir;  ///< its folder under the cgroup file system; "" when none was found
  bool v2 = false;
};

/// The memory cgroup from /proc/PID/cgroup's text and /proc/self/mountinfo's (pure): the v1
/// hierarchy with the memory controller, else the v2 one where it has the controller.
MemoryCgroup memory_cgroup_of(std::string_view proc_cgroup, std::string_view mountinfo,
                              const std::string& sys_root = "");
/// A live process's.
MemoryCgroup memory_cgroup(pid_t pid);

/// Its count of OOM kills: v2 memory.events' oom_kill, v1 memory.oom_control's; nullopt when
/// unreadable.
std::optional<uint64_t> oom_kills(const MemoryCgroup& cg);

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string where;  ///< the cgroup folder that sets it, or "" for the machine's memory
};
/// The limit that applies to it: the lowest of its own and its ancestors' (v2 memory.max, v1
/// memory.limit_in_bytes); the machine's memory (MemTotal) where none is set.
MemoryLimit memory_limit(const MemoryCgroup& cg);

/// Whether the kernel log says the OOM killer killed `pid` ("Killed process PID", "oom-kill:...
/// pid=PID"), in `log` (/dev/kmsg's records, one a line; pure).
bool log_says_oom_killed(std::string_view log, pid_t pid);
/// The same from /dev/kmsg now; nullopt where it cannot be read (not root).
std::optional<bool> kernel_log_says_oom_killed(pid_t pid);

/// "1.5 GiB", "400 MiB", "812 KiB".
std::string format_bytes(uint64_t bytes);

}  // namespace dtl::node
