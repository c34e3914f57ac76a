// Load for a c10d store server (dtlaunch's or torch's): N clients in one process, each connecting,
// validating as torch 2.x's TCPStore client does (VALIDATE and a PING in one write, then waiting for
// the nonce to come back), `add`ing 1 to one counter and then `wait`ing on a barrier key that the
// client whose add reaches N sets. Prints one JSON line: how long connecting took and how long until
// every client was released. Clients bind source addresses in 127.0.0.0/8, PER_ADDRESS clients to
// an address (8 by default, as from nodes of 8 GPUs), so that N is bounded neither by one address's
// ports nor by a server's connections per address. For scripts/bench/store.py.
#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

struct Run {
  asio::io_context io;
  tcp::endpoint server;
  long n = 0;
  long connected = 0, released = 0, failed = 0;
  long started = 0;       ///< connects begun
  long max_pending = 2048;  ///< connects in flight at once: under the listen backlog, as torch staggers its clients
  long per_address = 8;     ///< clients bound to one source address
  std::function<void()> start_next;
  Clock::time_point start, all_connected, counted, end;
  std::string first_error;
};

struct Client : std::enable_shared_from_this<Client> {
  Client(Run& run, long index) : run(run), sock(run.io), index(index) {}
  Run& run;
  tcp::socket sock;
  long index;
  std::string out;
  std::array<uint8_t, 8> in{};

  void fail(const std::string& what) {
    if (run.first_error.empty()) run.first_error = what;
    ++run.failed;
    run.start_next();
    finish();
  }
  void finish() {
    if (run.released + run.failed == run.n) {
      run.end = Clock::now();
      run.io.stop();
    }
  }

  void start() {
    sock.open(tcp::v4());
    // 127.a.b.c with c in 1..254: no address ends in .0 or .255.
    auto k = static_cast<uint32_t>(index / run.per_address);
    const uint32_t src = (127u << 24) | ((1 + k / (254 * 256)) << 16) | ((k / 254 % 256) << 8) | (1 + k % 254);
    boost::system::error_code ec;
    sock.bind(tcp::endpoint(asio::ip::address_v4(src), 0), ec);
    if (ec) return fail("bind: " + ec.message());
    sock.async_connect(run.server, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return self->fail("connect: " + ec.message());
      self->sock.set_option(tcp::no_delay(true));
      if (++self->run.connected == self->run.n) self->run.all_connected = Clock::now();
      self->run.start_next();
      self->out.clear();
      self->out += std::string("\x00\xce\xf7\x85\x3c", 5);  // VALIDATE + magic
      self->out.push_back(13);                                // PING + nonce, as torch 2.x sends it
      for (int i = 0; i < 4; ++i) self->out.push_back(static_cast<char>(self->nonce() >> (8 * i)));
      self->send_then_read(4, [self] { self->pinged(); });
    });
  }

  uint32_t nonce() const { return static_cast<uint32_t>(index) * 2654435761u + 1; }

  void pinged() {
    uint32_t back = 0;
    for (int i = 3; i >= 0; --i) back = (back << 8) | in[i];
    if (back != nonce()) return fail("ping answered " + std::to_string(back) + ", not the nonce");
    out.clear();
    out.push_back(4);  // ADD
    put_str(out, "/counter");
    put_u64(out, 1);
    send_then_read(8, [self = shared_from_this()] { self->added(); });
  }

  template <class Next>
  void send_then_read(size_t reply, Next next) {
    asio::async_write(sock, asio::buffer(out), [self = shared_from_this(), reply, next](const boost::system::error_code& ec,
                                                                                       size_t) {
      if (ec) return self->fail("write: " + ec.message());
      asio::async_read(self->sock, asio::buffer(self->in.data(), reply),
                       [self, next](const boost::system::error_code& ec, size_t) {
                         if (ec) return self->fail("read: " + ec.message());
                         next();
                       });
    });
  }

  void added() {
    int64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | in[i];
    out.clear();
    if (count == run.n) {
      run.counted = Clock::now();
      out.push_back(1);  // SET the barrier key
      put_str(out, "/barrier");
      put_str(out, "1");
    }
    out.push_back(6);  // WAIT
    put_u64(out, 1);
    put_str(out, "/barrier");
    send_then_read(1, [self = shared_from_this()] {
      if (self->in[0] != 0) return self->fail("wait answered " + std::to_string(self->in[0]));
      ++self->run.released;
      self->sock.close();
      self->finish();
    });
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 7) {
    std::cerr << "usage: store_load HOST PORT CLIENTS [TIMEOUT_S [CONNECTS_IN_FLIGHT [PER_ADDRESS]]]\n";
    return 2;
  }
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  Run run;
  run.server = tcp::endpoint(asio::ip::make_address(argv[1]), static_cast<unsigned short>(std::stoi(argv[2])));
  run.n = std::stol(argv[3]);
  const int timeout_s = argc >= 5 ? std::stoi(argv[4]) : 600;
  if (argc >= 6) run.max_pending = std::stol(argv[5]);
  if (argc >= 7) run.per_address = std::max(1L, std::stol(argv[6]));
  std::vector<std::shared_ptr<Client>> clients;
  clients.reserve(run.n);
  asio::steady_timer deadline(run.io, std::chrono::seconds(timeout_s));
  bool timed_out = false;
  deadline.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    timed_out = true;
    run.io.stop();
  });
  run.start = Clock::now();
  run.start_next = [&] {
    if (run.started >= run.n) return;
    clients.push_back(std::make_shared<Client>(run, run.started++));
    clients.back()->start();
  };
  for (long i = 0; i < run.max_pending; ++i) run.start_next();
  run.io.run();
  if (timed_out) run.end = Clock::now();
  auto secs = [&](Clock::time_point t) { return std::chrono::duration<double>(t - run.start).count(); };
  std::printf("{\"clients\": %ld, \"released\": %ld, \"failed\": %ld, \"timed_out\": %s, \"connect_s\": %.4f, "
              "\"counted_s\": %.4f, \"total_s\": %.4f, \"first_error\": \"%s\"}\n",
              run.n, run.released, run.failed, timed_out ? "true" : "false",
              run.connected == run.n ? secs(run.all_connected) : -1.0,
              run.counted == Clock::time_point() ? -1.0 : secs(run.counted), secs(run.end), run.first_error.c_str());
  return run.released == run.n ? 0 : 1;
}
