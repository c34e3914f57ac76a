// libFuzzer target for config files, through the entry point that `--config_file FILE --print_config`
// and `dtlaunch config validate FILE` use: whatever the file holds, the parse ends in bounded time and
// memory (yaml-cpp 0.7 loops on `,`), and gives either one error line or settings that --print_config
// shows one per line and that load back. Seeds: tests/fuzz/config_seeds and tests/golden/config.
#include <cstdint>
#include <string>

#include "config/command_line.h"
#include "config/config_file.h"
#include "tests/support/checks.h"

using namespace dtl::config;

namespace {

ParseResult validate(const std::string& text) {
  return parse_command_line({"--config_file", "fuzz.yaml", "--print_config"},
                            [](const std::string&) { return std::optional<std::string>(); },
                            [&](const std::string&) { return FileRead{FileRead::Status::ok, text}; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ParseResult r = validate(text);
  if (!r) {
    const dtl::Error& e = r.error();
    FUZZ_CHECK(e.exit_code == 2);
    FUZZ_CHECK(!e.message.empty());
    FUZZ_CHECK(e.message.find('\n') == std::string::npos);
    FUZZ_CHECK(e.message.find('\x1b') == std::string::npos);
    FUZZ_CHECK(e.message.size() < 4 * size + 4096);
    return 0;
  }
  // Every value is at most kMaxValueBytes, and no line is padded past a few dozen columns.
  FUZZ_CHECK(r->output.size() < 200 * (4 * kMaxValueBytes + 256));
  for (const auto& w : r->warnings) FUZZ_CHECK(w.find('\n') == std::string::npos);
  // What --print_config shows is a dtlaunch config file, and it gives the same settings again.
  ParseResult again = validate(r->output);
  FUZZ_CHECK(again);
  return 0;
}
