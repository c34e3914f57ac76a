#include <catch2/catch.hpp>

#include <unistd.h>

#include "node/process.h"

using namespace dtl::node;

TEST_CASE("process kind: a Python interpreter by its executable or its libpython, CUDA by its driver") {
  CHECK(process_kind_of("", "/usr/bin/python3.11").python);
  CHECK(process_kind_of("", "/venv/bin/python").python);
  CHECK_FALSE(process_kind_of("", "/usr/bin/python3-config").python);
  CHECK_FALSE(process_kind_of("", "/w/build/apps/dtl-train/dtl-train").python);
  const std::string maps =
      "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n"
      "7f20-7f30 r-xp 00000000 08:01 43 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n";
  const auto embedded = process_kind_of(maps, "/opt/app/trainer");
  CHECK(embedded.python);
  CHECK(embedded.cuda);
  // a file merely named so in a path is not one
  CHECK_FALSE(process_kind_of("7f00-7f10 r--p 0 08:01 44 /data/libpython/notes.txt\n", "/bin/app").python);
}

TEST_CASE("process kind: this test is native, and it is its own rank process") {
  const auto r = rank_process(getpid());
  CHECK(r.pid == getpid());
  CHECK_FALSE(r.kind.python);
}
