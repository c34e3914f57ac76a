// `hostlist_expand EXPR...`: each expression's hosts, one a line, as `scontrol show hostnames EXPR`
// prints them (e2e/test_hostlist.py compares the two); a bad one: its reason on stderr and exit 2.
#include <iostream>
#include <stdexcept>

#include "config/hostlist.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    try {
      for (const auto& host : dtl::config::expand_hostlist(argv[i])) std::cout << host << "\n";
    } catch (const std::invalid_argument& e) {
      std::cerr << "hostlist_expand: " << e.what() << "\n";
      return 2;
    }
  }
  return 0;
}
