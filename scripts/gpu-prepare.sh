#!/usr/bin/env bash
# Run HERE, before a GPU session: the device machine has torch, CUDA, CMake and a compiler but none
# of dtlaunch's libraries, and cannot install any. This builds gpu-kit/ (git-ignored, ~10 MB):
#   gpu-kit/bin/dtlaunch   dtlaunch, finding the shared libraries it needs in gpu-kit/lib ($ORIGIN)
#   gpu-kit/lib/           those libraries (yaml-cpp, spdlog, fmt, libcrypto, libstdc++, libgcc_s)
#   gpu-kit/include/CLI/   CLI11's headers, the one library dtl-train's own build needs besides torch
#   gpu-kit/bin/py-spy     py-spy from PyPI (a static binary), which reads the hung ranks' stacks
# Then run on the device, carrying the kit:  run(command="scripts/gpu-check.sh", carry=["gpu-kit"])
# gpu-check.sh finds the kit and builds only dtl-train there (-DDTL_BUILD_LAUNCHER=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
kit=gpu-kit
rm -rf "$kit" && mkdir -p "$kit/bin" "$kit/lib" "$kit/include"
cmake -S . -B build-gpu-kit -DCMAKE_BUILD_TYPE=Release -DDTL_BUILD_TESTS=OFF -DDTL_BUILD_TRAINER=OFF \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' >/dev/null
cmake --build build-gpu-kit -j"$(nproc)" --target dtlaunch
cp build-gpu-kit/apps/dtlaunch/dtlaunch "$kit/bin/"
# Every shared library dtlaunch loads but the C library's own (libc, libm, the loader: the device has
# newer ones).
kit_libs() { ldd "$kit/bin/dtlaunch" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|ld-linux[^/]*)\.so'; }
kit_libs | while read -r lib; do cp -L "$lib" "$kit/lib/"; done
cp -r "$(dirname "$(find /usr/include -path '*/CLI/CLI.hpp' | head -1)")" "$kit/include/"
# py-spy, the version scripts/parity/make_venv.sh pins: its wheel holds one static binary.
pyspy=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
  -d "$pyspy" py-spy==0.4.3
python3 -m zipfile -e "$pyspy"/py_spy-*.whl "$pyspy/x"
install -m 755 "$pyspy"/x/py_spy-*.data/scripts/py-spy "$kit/bin/py-spy"
rm -rf "$pyspy"
# The kit must run on its own libraries, found through $ORIGIN.
"$kit/bin/dtlaunch" --version >/dev/null
kit_libs | xargs readlink -f | grep -v "^$PWD/$kit/lib/" && { echo "gpu-prepare.sh: dtlaunch still uses system libraries (above)" >&2; exit 1; }
glibc=$(objdump -T "$kit/bin/dtlaunch" "$kit"/lib/*.so* 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
echo "gpu-prepare.sh: $kit is $(du -sh "$kit" | cut -f1), needs $glibc or newer on the device;"
echo "  device run: scripts/gpu-check.sh with carry [\"$kit\"] (CONTRIBUTING.md, "The GPU check")"
