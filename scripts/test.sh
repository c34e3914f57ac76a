#!/usr/bin/env bash
# Sets everything up (the oracle venv too: scripts/parity/make_venv.sh), checks the style of the files
# .clang-format-covered lists and the layering of the includes, builds, and runs every test: 20 s each of fuzzing the rendezvous frame decoder,
# the c10d store's request decoder and the config loader (clang, libFuzzer), then every unit and end-to-end test through ctest, then, where the CUDA
# toolkit is installed, a compile-and-link check of dtl-train's NCCL build against the pip torch
# wheel's libtorch (scripts/build-cuda.sh with CHECK_ONLY=1: no GPU needed; ~1.5 min download of
# the wheel and ~2-4 min of building). NCCL_CHECK=0 skips that last step. Between the two, the
# packages: the .deb and the pip wheel (PACKAGING_CHECK=0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The oracles the tests run dtlaunch beside (torch 2.15's torchrun, accelerate, deepspeed, transformers),
# pinned, in a venv outside the repository: made once (~3 min, ~5 GB), then reused. Without PyPI the
# tests that need them show as skipped.
scripts/parity/make_venv.sh ||
  echo "test.sh: no oracle venv: the tests against torchrun 2.x, accelerate, deepspeed and transformers show as skipped"
scripts/check-format.sh
python3 scripts/check_layers.py   # every #include points down a layer (docs/architecture.md)
python3 scripts/check_links.py   # every relative link and #anchor of the Markdown documentation resolves
scripts/fuzz.sh 20 frame_decoder_fuzz
scripts/fuzz.sh 20 store_decoder_fuzz
scripts/fuzz.sh 20 config_file_fuzz
scripts/build.sh -DDTL_BUILD_TESTS=ON
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
# The packages, after the suite because they build again: the .deb (dpkg -i, run, dpkg -r; root
# only) and the pip wheel (scikit-build-core and auditwheel from PyPI; a static build, ~3 min on 2
# cores). PACKAGING_CHECK=0 skips them.
if [ "${PACKAGING_CHECK:-1}" = 0 ]; then
  echo "test.sh: PACKAGING_CHECK=0: the .deb and the wheel are not checked"
else
  for kind in deb wheel; do
    start=$SECONDS
    package=$(scripts/package.sh "$kind" | tail -1)
    rc=0
    python3 "tests/packaging/test_$kind.py" "$package" || rc=$?
    [ "$rc" = 77 ] && echo "test.sh: the $kind check SKIPPED (above)"
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
    echo "test.sh: $kind built and checked in $((SECONDS - start)) s"
  done
fi
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ "${NCCL_CHECK:-1}" = 0 ]; then
  echo "test.sh: NCCL_CHECK=0: the NCCL build of dtl-train is not checked"
elif [ "${free_kb:-0}" -lt 3000000 ] && [ ! -d build-cuda/venv ]; then
  echo "test.sh: less than 3 GB free here: the NCCL build of dtl-train (1.2 GB wheel) is not checked"
elif command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || [ -n "${CUDA_HOME:-}" ]; then
  INSTALL_TORCH=1 CHECK_ONLY=1 scripts/build-cuda.sh
else
  echo "test.sh: no CUDA toolkit here (nvcc): the NCCL build of dtl-train is not checked"
fi
