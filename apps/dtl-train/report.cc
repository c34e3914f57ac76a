#include "report.h"

#include <cxxabi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>
#include <typeinfo>

namespace dtl::train {

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string error_file_json(const ErrorReport& r, long long timestamp) {
  return "{\"message\": {\"message\": \"" + json_escape(r.type + ": " + r.message) +
         "\", \"extraInfo\": {\"py_callstack\": \"" + json_escape(r.callstack) + "\", \"timestamp\": \"" +
         std::to_string(timestamp) + "\"}}}\n";
}

void write_error_file(const std::string& path, const ErrorReport& r, long long timestamp) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::trunc);
  out << error_file_json(r, timestamp);
}

void exit_with_report(const std::string& error_file, const ErrorReport& r, const std::string& line, int code,
                      std::chrono::milliseconds linger) {
  const long long now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_error_file(error_file, r, now);
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  if (linger.count() > 0) std::this_thread::sleep_for(linger);
  std::_Exit(code);
}

std::string type_name(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

}  // namespace dtl::train
