// Reading and writing whole files, behind a function type so that config parsing is tested without
// a disk, and one atomic write for everything dtlaunch writes for the user.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace dtl::config {

/// Config files are a few hundred bytes; a file past this is refused unread (also /dev/zero), which
/// bounds the parse: the worst 256 KiB we found (a flow list of 131072 items) take 0.4 s and 75 MB.
inline constexpr size_t kMaxConfigFileBytes = 256 << 10;
/// How long a FIFO given as a file may wait for its first bytes or its end.
inline constexpr std::chrono::milliseconds kPipeWriterWait{5000};

struct FileRead {
  enum class Status { ok, missing, error } status = Status::ok;
  std::string text;  ///< the contents, or why it could not be read ("Permission denied")
};

using ReadFile = std::function<FileRead(const std::string& path)>;

/// The real disk; a file larger than kMaxConfigFileBytes is an error.
ReadFile disk_files();

/// Writes `text` to `path` through a temporary file in the same directory (fsync, rename, fsync of the
/// directory), creating missing parent directories: readers see the old file or the new one, never
/// half of one. Returns "" on success, else why it failed.
std::string write_file_atomically(const std::string& path, const std::string& text);

}  // namespace dtl::config
