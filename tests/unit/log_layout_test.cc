#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "launcher/log_layout.h"

using dtl::launcher::RunLogDir;

TEST_CASE("a log folder that cannot be made is named as the setting that gave it") {
  const auto file = std::filesystem::temp_directory_path() / "dtl_log_layout_test_file";
  std::ofstream(file) << "not a folder";
  const std::string base = (file / "logs").string();
  auto message = [&](auto make) -> std::string {
    try {
      make();
    } catch (const std::system_error& e) {
      return e.what();
    }
    return "(made)";
  };
  CHECK_THAT(message([&] { RunLogDir(base, "job", false); }), Catch::StartsWith("cannot create --log_dir " + base));
  CHECK_THAT(message([&] { RunLogDir(base, "job", false, "cfg.yaml:2:10: log_dir"); }),
             Catch::StartsWith("cannot create cfg.yaml:2:10: log_dir " + base));
  std::filesystem::remove(file);
}

TEST_CASE("a temporary folder of error files keeps one attempt; a log folder keeps every attempt") {
  const auto tmp = std::filesystem::temp_directory_path() / "dtl_log_layout_attempts";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  RunLogDir logs(tmp.string(), "job", true);  // --log_dir: torchrun's layout, every attempt kept
  for (int restart : {0, 1, 2}) logs.rank_dir(restart, 0);
  CHECK(std::distance(std::filesystem::directory_iterator(logs.path()), {}) == 3);
  RunLogDir errors("", "job", true);  // dtlaunch's own temporary folder for error files only
  for (int restart : {0, 0, 1, 1, 2}) errors.rank_dir(restart, restart % 2);
  CHECK(std::distance(std::filesystem::directory_iterator(errors.path()), {}) == 1);
  CHECK(std::filesystem::exists(errors.path() / "attempt_2" / "0"));
  RunLogDir tee("", "job", false);  // logs asked for, kept at the end: every attempt
  for (int restart : {0, 1}) tee.rank_dir(restart, 0);
  CHECK(std::distance(std::filesystem::directory_iterator(tee.path()), {}) == 2);
  errors.finish(false);
  tee.finish(false);
  std::filesystem::remove_all(tmp);
}
