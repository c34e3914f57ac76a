#include "config/files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/posix.h"

namespace dtl::config {
namespace {

std::string errno_text() { return std::strerror(errno); }

/// Whether `fd` has bytes or its end within `wait`.
bool readable_within(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  const int ready = posix::retry_eintr([&] { return ::poll(&p, 1, static_cast<int>(wait.count())); });
  return ready > 0;
}

}  // namespace

ReadFile disk_files() {
  return [](const std::string& path) -> FileRead {
    // Not blocking in open: a FIFO nobody writes would hold it for ever.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      return {errno == ENOENT ? FileRead::Status::missing : FileRead::Status::error, errno_text()};
    }
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      ::close(fd);
      return {FileRead::Status::error, "it is a directory"};
    }
    // A pipe (`--hostfile <(...)`) has a writer at once; a FIFO whose writer never comes is an error.
    if (S_ISFIFO(st.st_mode) && !readable_within(fd, kPipeWriterWait)) {
      ::close(fd);
      return {FileRead::Status::error, "it is a pipe that nothing wrote to in " +
                                           std::to_string(kPipeWriterWait.count() / 1000) + " s"};
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    posix::ReadAll got = posix::read_all(fd, kMaxConfigFileBytes);
    ::close(fd);
    if (got.error) return {FileRead::Status::error, std::strerror(got.error)};
    if (got.too_large) {
      return {FileRead::Status::error,
              "larger than " + std::to_string(kMaxConfigFileBytes >> 10) + " KiB, too large for a config file"};
    }
    return {FileRead::Status::ok, std::move(got.text)};
  };
}

std::string write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create " + dir.string() + ": " + ec.message();

  std::string tmp = dir.string();
  tmp.append("/.").append(target.filename().string()).append(".XXXXXX");
  int fd = mkstemp(tmp.data());
  if (fd < 0) return "cannot create a file in " + dir.string() + ": " + errno_text();
  auto fail = [&](const std::string& what) {
    std::string why = what + ": " + errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    return why;
  };
  if (fchmod(fd, 0644) != 0) return fail("cannot set the permissions of " + tmp);
  if (!posix::write_all(fd, text)) return fail("cannot write " + tmp);
  if (fsync(fd) != 0) return fail("cannot sync " + tmp);
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + errno_text();
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = "cannot rename " + tmp + " to " + path + ": " + errno_text();
    ::unlink(tmp.c_str());
    return why;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
  return "";
}

}  // namespace dtl::config
