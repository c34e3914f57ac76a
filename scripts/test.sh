#!/usr/bin/env bash
# Sets everything up, builds, and runs every test (unit and end-to-end) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DDTL_BUILD_TESTS=ON
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600
