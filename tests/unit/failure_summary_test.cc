#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "launcher/failure_summary.h"

using namespace dtl::launcher;
using namespace std::chrono;

namespace {

int exited(int code) { return code << 8; }
int killed_by(int sig) { return sig; }

system_clock::time_point at(long long ms) { return system_clock::time_point(milliseconds(ms)); }

}  // namespace

TEST_CASE("a signal death is reported as torchrun does, with the signal's name") {
  auto f = describe_failure(1, 3, 4242, killed_by(SIGSEGV), at(1000), "/nonexistent/error.json");
  CHECK(f.exitcode == -11);
  CHECK(f.message == "Signal 11 (SIGSEGV) received by PID 4242");
  CHECK(f.error_file == "<N/A>");
  CHECK(dtl::exit_code_for({f}) == 139);
}

TEST_CASE("an exit code without error file gets torchrun's hint") {
  auto f = describe_failure(0, 0, 7, exited(3), at(0), "/nonexistent");
  CHECK(f.exitcode == 3);
  CHECK(dtl::exit_code_for({f}) == 3);
  CHECK(f.message == "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html");
}

TEST_CASE("the error file's callstack and timestamp are used") {
  auto path = std::filesystem::temp_directory_path() / "dtl_failure_test_error.json";
  std::ofstream(path) << R"({"message": {"message": "ValueError: bad", "extraInfo": )"
                      << R"({"py_callstack": "Traceback:\n  line 1\nValueError: bad\n", "timestamp": "1700000000"}}})";
  auto f = describe_failure(0, 0, 7, exited(1), at(5), path.string());
  CHECK(f.error_file == path.string());
  CHECK(f.message == "Traceback:\n  line 1\nValueError: bad");
  CHECK(f.timestamp_s == 1700000000);
  std::ofstream(path) << R"({"message": "plain text", "timestamp": 1600000000})";
  f = describe_failure(0, 0, 7, exited(1), at(5), path.string());
  CHECK(f.message == "plain text");
  CHECK(f.timestamp_s == 1600000000);
  std::ofstream(path) << "{not json";
  f = describe_failure(0, 0, 7, exited(1), at(5), path.string());
  CHECK_THAT(f.message, Catch::StartsWith("unreadable error file"));
  std::filesystem::remove(path);
}

TEST_CASE("the root cause is the first failure observed, the lowest rank on a tie") {
  std::vector<dtl::Failure> fs{describe_failure(0, 0, 1, exited(1), at(30), ""),
                               describe_failure(1, 1, 2, exited(2), at(10), ""),
                               describe_failure(2, 2, 3, exited(3), at(10), "")};
  CHECK(dtl::root_cause(fs).rank == 1);
}

TEST_CASE("the summary has torchrun's layout, byte for byte") {
  setenv("TZ", "UTC", 1);
  tzset();
  auto f = describe_failure(1, 1, 9723, exited(3), at(1700000000000), "");
  std::string s = format_summary("train.py", {f}, "node0");
  CHECK(s ==
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2023-11-14_22:13:20\n"
        "  host      : node0\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 3 (pid: 9723)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================");
}

TEST_CASE("other failures are listed by rank and the width follows the title when short") {
  std::vector<dtl::Failure> fs{describe_failure(2, 2, 12, killed_by(SIGKILL), at(20), ""),
                               describe_failure(0, 0, 10, exited(1), at(10), "")};
  fs[0].message = "m";
  fs[1].message = "root";
  setenv("TZ", "UTC", 1);
  tzset();
  std::string s = format_summary("x", fs, "h");
  // the longest line, "  time      : 1970-01-01_00:00:00", is 33 wide
  CHECK(s.rfind(std::string(33, '=') + "\nx FAILED\n" + std::string(33, '-') + "\n", 0) == 0);
  CHECK(s.find("Failures:\n[1]:\n") != std::string::npos);
  CHECK(s.find("Root Cause (first observed failure):\n[0]:\n") != std::string::npos);
  CHECK(s.find("  exitcode  : -9 (pid: 12)") != std::string::npos);
}
