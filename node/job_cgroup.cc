#include "node/job_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "base/posix.h"

namespace dtl::node {
namespace {

std::vector<std::string> split(std::string_view line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= line.size()) {
    size_t end = line.find(sep, start);
    if (end == std::string_view::npos) end = line.size();
    out.emplace_back(line.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// mountinfo writes a space in a path as \040 (and tab, newline, backslash likewise).
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool populated(const std::string& path) {
  std::istringstream events(posix::read_small_file(path + "/cgroup.events"));
  for (std::string key, value; events >> key >> value;) {
    if (key == "populated") return value != "0";
  }
  return false;  // gone, or unreadable: nothing to wait for
}

/// rmdir of the cgroup and of the cgroups below it (a nested dtlaunch's, killed with this one), deepest
/// first: a cgroup's files go with its directory, its sub-cgroups do not.
bool remove_tree(const std::string& path) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) remove_tree(entry.path().string());
  }
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

}  // namespace

std::optional<std::string> make_job_cgroup_dir(const std::string& parent, pid_t pid, std::string& why) {
  const std::string first = parent + "/dtlaunch-" + std::to_string(pid);
  for (int n = 0; n < kJobCgroupNames; ++n) {
    const std::string path = n == 0 ? first : first + "." + std::to_string(n);
    if (::mkdir(path.c_str(), 0755) == 0) return path;
    if (errno != EEXIST) {
      why = "cannot create " + path + ": " + std::strerror(errno);
      return std::nullopt;
    }
    // A dtlaunch that had this pid before was killed with its guard, and its cgroup stayed: empty,
    // it is removed; where its job still runs, the next name is tried.
    if (!populated(path) && remove_tree(path) && ::mkdir(path.c_str(), 0755) == 0) return path;
  }
  why = "cannot create " + first + ": it and the next " + std::to_string(kJobCgroupNames - 1) +
        " names are cgroups of jobs still running";
  return std::nullopt;
}

std::optional<std::string> own_cgroup_dir(std::string_view mountinfo, std::string_view self_cgroup) {
  std::optional<std::string> own;
  for (const auto& line : split(self_cgroup, '\n')) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  if (!own || own->empty() || (*own)[0] != '/') return std::nullopt;
  for (const auto& line : split(mountinfo, '\n')) {
    auto fields = split(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 5 || dash + 1 >= fields.size() || fields[dash + 1] != "cgroup2") continue;
    std::string root = unescape_octal(fields[3]);
    std::string mount = unescape_octal(fields[4]);
    // The mount shows the hierarchy from `root` down: this process's cgroup must lie under it.
    if (root == "/") return *own == "/" ? mount : mount + *own;
    if (*own == root) return mount;
    if (own->rfind(root + "/", 0) == 0) return mount + own->substr(root.size());
  }
  return std::nullopt;
}

std::unique_ptr<JobCgroup> JobCgroup::create(std::string& why) {
  auto parent = own_cgroup_dir(posix::read_small_file("/proc/self/mountinfo"), posix::read_small_file("/proc/self/cgroup"));
  if (!parent) {
    why = "no cgroup v2 hierarchy holds dtlaunch";
    return nullptr;
  }
  const auto made = make_job_cgroup_dir(*parent, getpid(), why);
  if (!made) return nullptr;
  const std::string& path = *made;
  int err = 0;
  int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) err = errno;
  int procs = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (procs < 0 && err == 0) err = errno;
  const bool killable = ::access((path + "/cgroup.kill").c_str(), W_OK) == 0;  // Linux 5.14+
  if (!killable && err == 0) err = errno;
  if (dir < 0 || procs < 0 || !killable) {
    why = std::string(!killable ? "no cgroup.kill in " : "cannot open ") + path + ": " + std::strerror(err);
    for (int fd : {dir, procs}) {
      if (fd >= 0) ::close(fd);
    }
    ::rmdir(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<JobCgroup>(new JobCgroup(path, dir, procs));
}

JobCgroup::~JobCgroup() {
  ::close(dir_fd_);
  ::close(procs_fd_);
}

bool remove_cgroup(const std::string& path, std::chrono::milliseconds wait) {
  int fd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ::access(path.c_str(), F_OK) != 0;
  posix::write_all(fd, "1");
  ::close(fd);
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (populated(path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return remove_tree(path);
}

}  // namespace dtl::node
