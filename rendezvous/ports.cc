#include "rendezvous/ports.h"

#include <cstdlib>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace dtl::rendezvous {

Result<int> reserve_check(const std::string& addr, int port, const PortNames& names) {
  namespace ip = boost::asio::ip;
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(addr, std::to_string(port), ip::tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return fail("cannot resolve " + names.addr + " '" + addr + "': " + ec.message());
  }
  std::string last_error;
  for (const auto& entry : endpoints) {
    ip::tcp::acceptor acceptor(io);
    auto endpoint = entry.endpoint();
    if (acceptor.open(endpoint.protocol(), ec)) {
      last_error = ec.message();
      continue;
    }
    acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (acceptor.bind(endpoint, ec)) {
      if (ec == boost::asio::error::address_in_use) {
        return fail(names.given(port) + " is already in use on " + addr + " (choose another port, or " + names.free() +
                    " for a free one)");
      }
      last_error = ec.message();
      continue;
    }
    return static_cast<int>(acceptor.local_endpoint().port());
  }
  return fail("cannot listen on " + addr + ":" + std::to_string(port) + ": " + last_error);
}

std::pair<std::string, int> parse_endpoint(const std::string& text, int default_port) {
  std::string host = text, port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) throw std::invalid_argument("unclosed '[' in '" + text + "'");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw std::invalid_argument("expected ':' after ']' in '" + text + "'");
      port_text = text.substr(close + 2);
    }
  } else if (auto colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon) throw std::invalid_argument("IPv6 addresses go in brackets: [" + text + "]");
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (host.empty()) throw std::invalid_argument("no host in '" + text + "'");
  int port = default_port;
  if (!port_text.empty() || text.back() == ':') {
    // digits only: strtol would also take a sign or leading blanks ("+80", " 80")
    const bool digits = port_text.find_first_not_of("0123456789") == std::string::npos;
    long p = std::strtol(port_text.c_str(), nullptr, 10);
    if (port_text.empty() || !digits || p < 1 || p > 65535) {
      throw std::invalid_argument("port '" + port_text + "' is not in 1..65535");
    }
    port = static_cast<int>(p);
  }
  return {host, port};
}

bool is_local_address(const std::string& host) {
  namespace ip = boost::asio::ip;
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  auto found = resolver.resolve(host, "0", ip::tcp::resolver::numeric_service, ec);
  if (ec) return false;
  for (const auto& entry : found) {
    ip::tcp::acceptor acceptor(io);
    if (acceptor.open(entry.endpoint().protocol(), ec)) continue;
    if (!acceptor.bind(entry.endpoint(), ec)) return true;
  }
  return false;
}

}  // namespace dtl::rendezvous
