#include <catch2/catch.hpp>
#include <stdexcept>

#include "config/hostlist.h"

using dtl::config::expand_hostlist;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlists expand as scontrol show hostnames does") {
  CHECK(expand_hostlist("gpu[01-03,07],cpu5") == Hosts{"gpu01", "gpu02", "gpu03", "gpu07", "cpu5"});
  CHECK(expand_hostlist("node1") == Hosts{"node1"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("x[99-101]") == Hosts{"x99", "x100", "x101"});
  CHECK(expand_hostlist("[1-2]") == Hosts{"1", "2"});
  CHECK(expand_hostlist("a[1-2],a1") == Hosts{"a1", "a2", "a1"});  // duplicates kept
  CHECK(expand_hostlist("a[1,1]") == Hosts{"a1", "a1"});
  CHECK(expand_hostlist("a[1-2,5-6],b[1,3]") == Hosts{"a1", "a2", "a5", "a6", "b1", "b3"});
}

TEST_CASE("hostlist padding follows the low bound's width") {
  CHECK(expand_hostlist("n[008-11]") == Hosts{"n008", "n009", "n010", "n011"});
  CHECK(expand_hostlist("n[01-3]") == Hosts{"n01", "n02", "n03"});
  CHECK(expand_hostlist("n[1-03]") == Hosts{"n1", "n2", "n3"});
  CHECK(expand_hostlist("a[00]") == Hosts{"a00"});
  CHECK(expand_hostlist("n[9-10]") == Hosts{"n9", "n10"});
}

TEST_CASE("several bracket groups multiply in scontrol's order") {
  CHECK(expand_hostlist("a[1-2]b[3-4]c[5-6]") ==
        Hosts{"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"});
  CHECK(expand_hostlist("n[2,1]x[6,5]") == Hosts{"n2x6", "n2x5", "n1x6", "n1x5"});
  CHECK(expand_hostlist("rack[1-2]-node[01-02]") ==
        Hosts{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"});
  CHECK(expand_hostlist("n[0-2][1-2]") == Hosts{"n01", "n02", "n11", "n12", "n21", "n22"});
}

TEST_CASE("commas and blanks separate items, empty items are skipped") {
  CHECK(expand_hostlist("a,,b") == Hosts{"a", "b"});
  CHECK(expand_hostlist(" a, b\tc") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("n[1-2],") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist("").empty());
}

TEST_CASE("malformed hostlists are refused with the reason") {
  const auto reason = [](const std::string& e) {
    try {
      expand_hostlist(e);
    } catch (const std::invalid_argument& x) {
      return std::string(x.what());
    }
    return std::string("(accepted)");
  };
  CHECK(reason("n[3-1]") == "hostlist item 'n[3-1]': range '3-1' goes down");
  CHECK(reason("n[1-2") == "hostlist item 'n[1-2': '[' without its ']'");
  CHECK(reason("n1-2]") == "hostlist item 'n1-2]': ']' without '['");
  CHECK(reason("n[]") == "hostlist item 'n[]': expected a number of 1 to 18 digits, got ''");
  CHECK(reason("n[a-b]") == "hostlist item 'n[a-b]': expected digits in a range, got 'a'");
  CHECK(reason("n[1,,2]") == "hostlist item 'n[1,,2]': expected a number of 1 to 18 digits, got ''");
  CHECK(reason("x[1-3-5]") == "hostlist item 'x[1-3-5]': expected digits in a range, got '3-5'");
  CHECK(reason("a[-2]") == "hostlist item 'a[-2]': expected a number of 1 to 18 digits, got ''");
  CHECK(reason("a[1-]") == "hostlist item 'a[1-]': expected a number of 1 to 18 digits, got ''");
  CHECK(reason("a[1 -2]") == "hostlist item 'a[1 ': a blank inside '[...]'");
  CHECK(reason("n[[1]]") == "hostlist item 'n[[': '[' inside '[...]'");
  CHECK(reason("n[1-2]x") == "hostlist item 'n[1-2]x': text after the last ']' ('x'), which Slurm refuses");
  CHECK(reason("n[1-65537]") == "hostlist item 'n[1-65537]': range '1-65537' has more than 65536 hosts");
  CHECK(reason("n[1-300][1-300]") == "hostlist item 'n[1-300][1-300]': more than 65536 hosts, dtlaunch's limit");
  CHECK(reason("n[1-40000,1-40000]") == "hostlist item 'n[1-40000,1-40000]': more than 65536 hosts, dtlaunch's limit");
}

TEST_CASE("a hostlist is bounded in all, and its first host is taken without expanding the rest") {
  std::string many;
  for (int i = 0; i < 4000; ++i) many += "x[0-65535],";  // 262 M hosts: std::bad_alloc once
  CHECK_THROWS_WITH(expand_hostlist(many), Catch::Contains("more than 65536 hosts in all"));
  CHECK(expand_hostlist(many, 1).front() == "x0");
  CHECK(expand_hostlist("a,b[1-3],c", 2) == Hosts{"a", "b1", "b2", "b3"});
}
