#include "agent/shared_port.h"

namespace dtl::agent {

void share_port_with_store(rendezvous::ServerOptions& server, store::Server& store) {
  server.shared_port = rendezvous::ServerOptions::SharedPort{
      [](const uint8_t* data, size_t size) -> std::optional<bool> {
        auto v = store::classify(data, size);
        if (v == store::Verdict::need_more) return std::nullopt;
        return v == store::Verdict::store;
      },
      [&store](boost::asio::ip::tcp::socket sock, const boost::asio::ip::tcp::endpoint& peer,
               std::vector<uint8_t> first) { store.adopt(std::move(sock), peer.address(), std::move(first)); },
      store.options().max_connections, store.options().max_per_address,
      [&store](const boost::asio::ip::address& peer) { return store.connections_from(peer) > 0; }};
  server.on_round = [&store] { store.reset(); };
}

}  // namespace dtl::agent
