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
