#include "launcher/log_layout.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace dtl::launcher {
namespace {

std::filesystem::path make_temp_dir(const std::filesystem::path& pattern) {
  std::string buf = pattern.string();
  if (!mkdtemp(buf.data())) throw std::system_error(errno, std::generic_category(), "cannot create " + pattern.string());
  return buf;
}

}  // namespace

RunLogDir::RunLogDir(const std::string& base, const std::string& run_id, bool error_files_only,
                     const std::string& base_called)
    : error_files_only_(error_files_only) {
  std::filesystem::path root = base;
  if (base.empty()) {
    std::filesystem::path tmp = std::filesystem::temp_directory_path();
    if (error_files_only && !std::getenv("TMPDIR") && access("/dev/shm", W_OK | X_OK) == 0) tmp = "/dev/shm";
    temp_root_ = make_temp_dir(tmp / "dtlaunch_XXXXXX");
    root = temp_root_;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec) throw std::system_error(ec, "cannot create " + base_called + " " + base);
  }
  std::string safe_id = run_id;
  for (auto& c : safe_id) c = (c == '/' ? '_' : c);
  try {
    run_dir_ = make_temp_dir(root / (safe_id + "_XXXXXX"));
  } catch (const std::system_error&) {
    finish(false);  // no empty temporary folder left behind
    throw;
  }
}

std::filesystem::path RunLogDir::rank_dir(int restart, int local_rank) {
  auto attempt = [&](int n) { return run_dir_ / ("attempt_" + std::to_string(n)); };
  std::error_code ec;
  if (restart != attempt_ && attempt_ >= 0 && temporary() && error_files_only_) std::filesystem::remove_all(attempt(attempt_), ec);
  attempt_ = restart;
  auto dir = attempt(restart) / std::to_string(local_rank);
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::system_error(ec, "cannot create " + dir.string());
  return dir;
}

void RunLogDir::finish(bool keep) {
  if (temporary() && !keep) {
    std::error_code ec;
    std::filesystem::remove_all(temp_root_, ec);
  }
}

}  // namespace dtl::launcher
