#include "rendezvous/ports.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace dtl::rendezvous {

PortResult reserve_check(const std::string& addr, int port) {
  namespace ip = boost::asio::ip;
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(addr, std::to_string(port), ip::tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return "cannot resolve --master_addr '" + addr + "': " + ec.message();
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
        return "--master_port " + std::to_string(port) + " is already in use on " + addr +
               " (choose another port, or --master_port=0 for a free one)";
      }
      last_error = ec.message();
      continue;
    }
    return static_cast<int>(acceptor.local_endpoint().port());
  }
  return "cannot listen on " + addr + ":" + std::to_string(port) + ": " + last_error;
}

}  // namespace dtl::rendezvous
