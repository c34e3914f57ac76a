// The small POSIX needs of every layer, each written once: whole writes and reads that survive
// signals, a program's output lines, a library loaded at run time, and facts about this machine.
#pragma once

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtl::posix {

/// Calls `call` again while it fails with EINTR (a signal arrived); its last result.
template <class Call>
auto retry_eintr(Call call) {
  decltype(call()) r;
  do {
    r = call();
  } while (r < 0 && errno == EINTR);
  return r;
}

/// read(2) that a signal does not interrupt: bytes read, 0 at the end, -1 with errno set.
long read_some(int fd, void* buf, size_t size);

/// Writes all of `data`, waiting when `fd` is non-blocking. False (errno set) once it cannot, e.g.
/// the reader is gone.
bool write_all(int fd, std::string_view data);

/// What reading a whole descriptor gave.
struct ReadAll {
  std::string text;        ///< at most `limit` bytes
  int error = 0;           ///< errno of the read that failed, 0 when it reached the end
  bool too_large = false;  ///< the descriptor held more than `limit` bytes; reading stopped there
};
/// Reads `fd` to its end, or until more than `limit` bytes came.
ReadAll read_all(int fd, size_t limit = std::numeric_limits<size_t>::max());

/// The first `limit` bytes of a file (a /proc or /sys one, say); "" when it cannot be opened.
std::string read_small_file(const std::string& path, size_t limit = 1 << 20);

/// What a program printed on its standard output, and how it ended.
struct ProgramOutput {
  std::vector<std::string> lines;  ///< stdout split at '\n', a last unterminated line included
  std::optional<int> exit_code;    ///< none: it could not start, died of a signal or ran out of time
};
/// poll(2), passed in so that tests can make it fail.
using PollFunction = int (*)(pollfd* fds, nfds_t count, int timeout_ms);
/// Runs argv[0] (searched in PATH) with stdin and stderr on /dev/null; killed after `timeout`, or
/// as soon as `poll` fails (its output is then as cut short as a timeout's).
ProgramOutput run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          PollFunction poll = ::poll);

/// A shared library loaded at run time, so that the binary runs where it is missing; closed when
/// this goes. Empty when it could not be loaded.
class Library {
 public:
  explicit Library(const char* name);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  explicit operator bool() const { return handle_ != nullptr; }
  /// The function `name` of type `Fn`, or nullptr when the library (or the symbol) is missing.
  template <class Fn>
  Fn* function(const char* name) const {
    return reinterpret_cast<Fn*>(find(name));
  }

 private:
  void* find(const char* name) const;
  void* handle_ = nullptr;
};

/// The CPUs this process may run on (its affinity mask), else those online; at least 1.
int cpu_count();

/// The CPUs online on this machine, whatever the affinity mask.
int online_cpu_count();

/// The name this machine goes by, as failure summaries and the rendezvous show it.
std::string host_name();

/// This machine's addresses as `hostname -I` lists them (what deepspeed's runner asks a host for):
/// every interface's IPv4 and IPv6 address in getifaddrs' order, but loopback and IPv6 link-local.
std::vector<std::string> host_addresses();
/// The name of the interface that holds `address` ("eth0"), or "" when none does.
std::string interface_of(const std::string& address);

/// PATH lookup as execvp does it, for an executable regular file. A name with a '/' is checked as
/// given. Returns the path to exec.
std::optional<std::string> find_executable(const std::string& name, const std::string& path_env);

/// Whether anything is at `path` (access F_OK).
bool path_exists(const std::string& path);

/// What is at `path`, the last component not followed ("a folder", "a regular file", "a FIFO",
/// "a symbolic link", "a socket", "a device"); nullopt when nothing is.
std::optional<std::string> file_kind(const std::string& path);

/// "SIGSEGV" for 11; "SIG<n>" for numbers without a name.
std::string signal_name(int sig);

/// The working directory's absolute path; "." when it cannot be had (removed under us).
std::string current_directory();

/// The descriptors this process may open: its soft RLIMIT_NOFILE now; 1 << 20 where it is unlimited
/// or cannot be read (the servers size their caps from it and bound them below that).
uint64_t fd_limit();

/// Raises the soft RLIMIT_NOFILE to the hard limit, once per process: a rendezvous server needs a
/// descriptor per node, more than the usual soft limit of 1024. Returns the soft limit now.
uint64_t raise_fd_limit();

/// In a child between fork and exec (async-signal-safe): puts back the soft limit the process had
/// before raise_fd_limit, so that programs dtlaunch starts get the limit they would have had (one
/// that select() can live with). Does nothing if it was never raised.
void restore_fd_limit_in_child();

}  // namespace dtl::posix
