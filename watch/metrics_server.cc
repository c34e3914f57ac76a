#include "watch/metrics_server.h"

#include <fcntl.h>

#include <optional>

#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace dtl::watch {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxConnections = 16;
constexpr auto kRequestTime = std::chrono::seconds(10);  ///< to send a whole request, and between requests
constexpr size_t kMaxHeader = 8 * 1024;

}  // namespace

struct MetricsServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, Page page) : io(io), acceptor(io), page(std::move(page)) {}
  asio::io_context& io;
  tcp::acceptor acceptor;
  Page page;
  size_t connections = 0;
  bool closed = false;

  /// One connection: requests read and answered in turn until either side closes it.
  struct Session : std::enable_shared_from_this<Session> {
    Session(std::shared_ptr<Impl> server, tcp::socket socket) : server(std::move(server)), stream(std::move(socket)) {}
    ~Session() { --server->connections; }
    std::shared_ptr<Impl> server;
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    std::optional<http::request_parser<http::empty_body>> parser;

    void read() {
      parser.emplace();
      parser->header_limit(kMaxHeader);
      stream.expires_after(kRequestTime);
      http::async_read(stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec || self->server->closed) return self->close();
        self->answer(self->parser->release());
      });
    }

    void answer(http::request<http::empty_body> request) {
      const bool keep = request.keep_alive();
      const unsigned version = request.version();
      const bool head = request.method() == http::verb::head;
      auto send = [self = shared_from_this(), keep, version, head](int status, const std::string& type,
                                                                   std::string body) {
        auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), version);
        response->set(http::field::content_type, type);
        response->keep_alive(keep);
        response->body() = std::move(body);
        response->prepare_payload();
        if (head) response->body().clear();  // Content-Length stays the body's
        http::async_write(self->stream, *response, [self, response, keep](beast::error_code ec, size_t) {
          if (ec || !keep || self->server->closed) return self->close();
          self->read();
        });
      };
      if (request.method() != http::verb::get && !head) return send(405, "text/plain", "only GET\n");
      std::string path(request.target());
      if (auto query = path.find('?'); query != std::string::npos) path.resize(query);
      server->page(path, send);
    }

    void close() {
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream.close();
    }
  };

  void accept() {
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || self->closed) return;
      if (!ec) {
        ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
        if (self->connections < kMaxConnections) {
          ++self->connections;
          std::make_shared<Session>(self, std::move(socket))->read();
        }  // else: closed at once, the scrape fails and is retried
      }
      self->accept();
    });
  }
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::listen(asio::io_context& io, const std::string& addr, int port,
                                                             const std::string& called, Page page) {
  auto impl = std::make_shared<Impl>(io, std::move(page));
  beast::error_code ec;
  const std::string where = addr + ":" + std::to_string(port);
  tcp::resolver resolver(io);
  auto found = resolver.resolve(addr, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) return fail(called + ": cannot resolve " + addr + " to listen on");
  const tcp::endpoint endpoint = found.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) ::fcntl(impl->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(called + ": cannot listen on " + where + ": " + ec.message());
  spdlog::info("serving the figures for Prometheus at http://{}/metrics", where);
  impl->accept();
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->closed = true;
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

int MetricsServer::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace dtl::watch
