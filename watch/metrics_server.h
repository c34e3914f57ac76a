// An HTTP server for Prometheus' scrapes (Boost.Beast): GET a path, get a page. At most 16
// connections at once, each with a bounded request and 10 s to send it; keep-alive as Prometheus
// uses it. What a path holds is its owner's (watch/live_figures.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "base/error.h"

namespace dtl::watch {

class MetricsServer {
 public:
  /// The answer to one request: status, Content-Type, body. Call it once, now or later.
  using Respond = std::function<void(int status, const std::string& type, std::string body)>;
  using Page = std::function<void(const std::string& path, Respond respond)>;

  /// Listens on addr:port (`called`: the setting that asked for it, for the error), or why it cannot.
  static Result<std::unique_ptr<MetricsServer>> listen(boost::asio::io_context& io, const std::string& addr, int port,
                                                       const std::string& called, Page page);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;

 private:
  struct Impl;
  explicit MetricsServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::watch
