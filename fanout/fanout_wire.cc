#include "fanout/fanout_wire.h"

#include <signal.h>
#include <unistd.h>

#include <sstream>

#include <boost/asio/ip/address.hpp>

#include "base/posix.h"
#include "base/text.h"

#ifndef DTL_VERSION
#define DTL_VERSION "unknown"
#endif

namespace dtl::fanout {

namespace {
constexpr size_t kMaxVariablesBytes = 1 << 20;
/// What node_hello puts in a line at most: a Kubernetes node with kube-proxy in IPVS mode has every
/// Service address on an interface, thousands of them.
constexpr size_t kHelloBudget = 1024;
constexpr std::string_view kHelloWord = "dtlaunch-node ";
constexpr std::string_view kSignalWord = "signal ";
/// Step 3's only lines, as names that mean the same on every Linux.
constexpr std::pair<int, std::string_view> kPassedOn[] = {{SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}};
constexpr size_t kMaxControlLine = 64;
}  // namespace

std::string node_hello(pid_t pid, const std::vector<std::string>& addresses) {
  std::string line = std::string(kHelloWord) + DTL_VERSION + " pid=" + std::to_string(pid);
  for (const auto& a : addresses) {
    if (line.size() + 1 + a.size() > kHelloBudget) break;
    line += " " + a;
  }
  return line;
}

std::optional<Hello> parse_hello(std::string_view line) {
  if (!line.starts_with(kHelloWord)) return std::nullopt;
  std::istringstream words{std::string(line.substr(kHelloWord.size()))};
  Hello h;
  words >> h.version;
  for (std::string a; words >> a;) {
    if (a.starts_with("pid=") && h.addresses.empty()) {
      h.pid = static_cast<pid_t>(std::strtol(a.c_str() + 4, nullptr, 10));
    } else {
      h.addresses.push_back(a);
    }
  }
  return h;
}

std::string meeting_address(const std::string& first_host, const std::vector<std::string>& reported) {
  const std::string host = first_host.substr(first_host.rfind('@') + 1);  // ssh's user@host is a login
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec || reported.empty()) return host;
  return reported.front();
}

std::string encode_variables(const Variables& vars) {
  std::string out;
  for (const auto& [name, value] : vars) out += name + "=" + value + '\0';
  return out + '\0';
}

std::optional<Variables> read_variables(int fd) {
  std::string data;
  char c;
  Variables vars;
  while (data.size() < kMaxVariablesBytes) {
    ssize_t n = posix::retry_eintr([&] { return ::read(fd, &c, 1); });
    if (n <= 0) return std::nullopt;
    if (c != '\0') {
      data += c;
      continue;
    }
    if (data.empty()) return vars;
    const auto eq = data.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    vars.emplace_back(data.substr(0, eq), data.substr(eq + 1));
    data.clear();
  }
  return std::nullopt;
}

bool passed_on(int sig) {
  for (const auto& [number, name] : kPassedOn) {
    if (number == sig) return true;
  }
  return false;
}

std::string encode_signal(int sig) {
  for (const auto& [number, name] : kPassedOn) {
    if (number == sig) return std::string(kSignalWord) + std::string(name) + "\n";
  }
  return {};
}

std::vector<int> decode_signals(std::string& pending, std::string_view chunk) {
  std::vector<int> out;
  pending.append(chunk);
  size_t begin = 0;
  for (size_t eol; (eol = pending.find('\n', begin)) != std::string::npos; begin = eol + 1) {
    const std::string_view line = std::string_view(pending).substr(begin, eol - begin);
    for (const auto& [number, name] : kPassedOn) {
      if (line.starts_with(kSignalWord) && line.substr(kSignalWord.size()) == name) out.push_back(number);
    }
  }
  pending.erase(0, begin);
  if (pending.size() > kMaxControlLine) pending.clear();  // no line of step 3 is this long
  return out;
}

std::string shell_quote(const std::string& s) { return "'" + text::replace_all(s, "'", "'\\''") + "'"; }

}  // namespace dtl::fanout
