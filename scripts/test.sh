#!/usr/bin/env bash
# Sets everything up, builds, and runs every test: 30 s of fuzzing the rendezvous frame decoder
# (clang, libFuzzer), then every unit and end-to-end test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fuzz.sh 30 frame_decoder_fuzz
scripts/build.sh -DDTL_BUILD_TESTS=ON
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600
