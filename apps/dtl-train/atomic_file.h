// Files that are either the old version or the complete new one, never half written: a crash
// while saving a checkpoint must not destroy the checkpoint a restart resumes from.
#pragma once

#include <string>
#include <string_view>

namespace dtl::train {

/// Writes `bytes` to `path` through a temp file in the same directory: write, fsync, rename over
/// `path`, fsync the directory. Throws std::system_error naming the file.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// Removes temp files that an interrupted write_file_atomically left next to `path`.
void remove_stale_temps(const std::string& path);

}  // namespace dtl::train
