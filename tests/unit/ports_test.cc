#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous/ports.h"

using namespace dtl::rendezvous;

TEST_CASE("endpoints are host[:port], with IPv6 in brackets") {
  CHECK(parse_endpoint("10.0.0.1:29400", 1) == std::pair<std::string, int>{"10.0.0.1", 29400});
  CHECK(parse_endpoint("node0", 29400) == std::pair<std::string, int>{"node0", 29400});
  CHECK(parse_endpoint("[::1]:5000", 1) == std::pair<std::string, int>{"::1", 5000});
  CHECK(parse_endpoint("[fe80::1]", 7) == std::pair<std::string, int>{"fe80::1", 7});
}

TEST_CASE("bad endpoints name what is wrong") {
  CHECK_THROWS_WITH(parse_endpoint("host:99999", 1), "port '99999' is not in 1..65535");
  CHECK_THROWS_WITH(parse_endpoint("host:", 1), "port '' is not in 1..65535");
  CHECK_THROWS_WITH(parse_endpoint(":80", 1), "no host in ':80'");
  CHECK_THROWS_WITH(parse_endpoint("::1:80", 1), "IPv6 addresses go in brackets: [::1:80]");
  CHECK_THROWS_WITH(parse_endpoint("[::1", 1), "unclosed '[' in '[::1'");
  // strtol alone would take these as port 80
  CHECK_THROWS_WITH(parse_endpoint("host:+80", 1), "port '+80' is not in 1..65535");
  CHECK_THROWS_WITH(parse_endpoint("host: 80", 1), "port ' 80' is not in 1..65535");
  CHECK_THROWS_WITH(parse_endpoint("[::1]:-0", 1), "port '-0' is not in 1..65535");
}

TEST_CASE("loopback is local, a documentation address is not") {
  CHECK(is_local_address("127.0.0.1"));
  CHECK_FALSE(is_local_address("192.0.2.1"));
}

TEST_CASE("port 0 finds a free port, and a listening port is reported in use") {
  const PortNames names{"--master_addr", "--master_port"};
  auto free = reserve_check("127.0.0.1", 0, names);
  REQUIRE(free);
  CHECK(*free > 0);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(fd, 1) == 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  auto taken = reserve_check("127.0.0.1", port, names);
  REQUIRE_FALSE(taken);
  CHECK(taken.error().exit_code == 2);
  CHECK(taken.error().message == "--master_port " + std::to_string(port) +
                                     " is already in use on 127.0.0.1 (choose another port, or "
                                     "--master_port=0 for a free one)");
  const PortNames from_file{"--master_addr", "master_port", "cfg.yaml:1:14: master_port"};
  CHECK(reserve_check("127.0.0.1", port, from_file).error().message ==
        "master_port=" + std::to_string(port) + " (from cfg.yaml:1:14: master_port) is already in use on 127.0.0.1 "
        "(choose another port, or 0 for a free one)");
  close(fd);
}

TEST_CASE("an address that does not resolve is named as the caller calls it") {
  auto r = reserve_check("no-such-host.invalid", 0, {"--local_addr", "the workers' port"});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith("cannot resolve --local_addr 'no-such-host.invalid': "));
}
