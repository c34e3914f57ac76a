// torchrun's log directory layout, so tools that read it keep working:
//   <log_dir>/<run_id>_<random>/attempt_<restart>/<local_rank>/{stdout.log,stderr.log,error.json}
#pragma once

#include <filesystem>
#include <string>

namespace dtl::launcher {

class RunLogDir {
 public:
  /// Creates `<base>/<run_id>_XXXXXX`; with an empty `base`, under a new temporary directory that
  /// is removed again by `finish` unless a log file was asked for. A temporary directory that will
  /// only hold error files goes to /dev/shm when TMPDIR is unset: removing it from a busy disk can
  /// take milliseconds per directory, on the way from a failure to dtlaunch's exit. Throws
  /// std::system_error, naming `base` as `base_called` (the flag, or where the value came from).
  RunLogDir(const std::string& base, const std::string& run_id, bool error_files_only,
            const std::string& base_called = "--log_dir");

  /// Creates and returns `attempt_<restart>/<local_rank>/`. In a temporary directory that holds only
  /// error files, an earlier attempt's folder goes once a new attempt's is made: the folder stays
  /// one attempt deep however often the group restarts.
  std::filesystem::path rank_dir(int restart, int local_rank);

  const std::filesystem::path& path() const { return run_dir_; }
  /// The temporary directory above the run's (empty when `--log_dir` was given).
  const std::filesystem::path& root() const { return temp_root_; }
  bool temporary() const { return !temp_root_.empty(); }

  /// Removes a temporary directory when nothing in it is for the user to read.
  void finish(bool keep);

 private:
  std::filesystem::path temp_root_;
  std::filesystem::path run_dir_;
  bool error_files_only_ = false;
  int attempt_ = -1;  ///< the newest attempt_<N> made
};

}  // namespace dtl::launcher
