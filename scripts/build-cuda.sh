#!/usr/bin/env bash
# Builds dtl-train with its NCCL backend against the libtorch inside the pip torch wheel (CUDA),
# plus dtlaunch, into build-cuda/. Needs the CUDA toolkit of the wheel's major version (nvcc on
# PATH, or CUDA_HOME) and torch installed for $PYTHON (INSTALL_TORCH=1 pip-installs it first).
#
#   scripts/build-cuda.sh [extra cmake configure arguments]
#
# TORCH_CUDA_ARCH_LIST passed to libtorch's CMake files (default 9.0, the H100/H200)
# PYTHON         the Python whose torch to build against (default python3)
# INSTALL_TORCH  1: pip-install torch first (into a venv in the build folder unless PYTHON is set)
# TORCH_SPEC     what INSTALL_TORCH installs (default torch==2.15.0, the version checked here, CUDA 13:
#                pinned so that a new release cannot break CI unannounced)
# BUILD_DIR      build folder (default build-cuda)
# TRAINER_ONLY   1: build dtl-train alone, with CLI11's headers from gpu-kit/include (a machine with
#                none of dtlaunch's libraries: the GPU machine; scripts/gpu-prepare.sh makes the kit)
# CHECK_ONLY     1: compile and link without the wheel's CUDA dependencies installed (links with
#                --allow-shlib-undefined; the binary then runs only where they are); for CI and for
#                machines without a GPU, where only the build itself is checked
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
build=${BUILD_DIR:-build-cuda}
torch_spec=${TORCH_SPEC:-torch==2.15.0}

have_torch() { "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'; }
if [ "${INSTALL_TORCH:-0}" = 1 ] && [ -z "${PYTHON:-}" ]; then
  # A venv in the build folder; the build needs only the wheel's files, so CHECK_ONLY skips its
  # several GB of CUDA dependencies (they come with the toolkit on a GPU machine's full install).
  [ -x "$build/venv/bin/python" ] || { mkdir -p "$build" && python3 -m venv "$build/venv"; }
  python=$build/venv/bin/python
  if ! have_torch; then
    if [ "${CHECK_ONLY:-0}" = 1 ]; then "$python" -m pip install -q --no-cache-dir --no-deps "$torch_spec"; else "$python" -m pip install -q "$torch_spec"; fi
  fi
elif ! have_torch; then
  if [ "${INSTALL_TORCH:-0}" = 1 ]; then
    "$python" -m pip install "$torch_spec"
  else
    echo "build-cuda.sh: $python has no torch; pip install torch (or INSTALL_TORCH=1), or set PYTHON" >&2
    exit 2
  fi
fi
# torch.utils.cmake_prefix_path without importing torch (importing loads the CUDA libraries).
prefix=$("$python" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "share", "cmake"))')
[ -f "$prefix/Torch/TorchConfig.cmake" ] || { echo "build-cuda.sh: no TorchConfig.cmake under $prefix" >&2; exit 2; }
# The wheel's own folder first: TorchConfig's find_library would otherwise take a system libtorch
# and libc10 (Debian's libtorch-dev) over the wheel's.
torch_root=$(dirname "$(dirname "$prefix")")

nvcc=$(command -v nvcc || true)
[ -n "${CUDA_HOME:-}" ] && nvcc=$CUDA_HOME/bin/nvcc
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || { echo "build-cuda.sh: nvcc not found (install the CUDA toolkit or set CUDA_HOME)" >&2; exit 2; }
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
torch_version=$("$python" -c 'import importlib.metadata as m; print(m.version("torch"))')
echo "build-cuda.sh: torch $torch_version at $prefix; CUDA $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $cuda_home"

# dtl-train compiles no CUDA code of its own: naming an architecture skips libtorch's GPU probe,
# which needs a GPU and a CUDA dialect CMake may not know for a newer nvcc.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
extra=()
targets=(dtl-train dtlaunch)
if [ "${TRAINER_ONLY:-0}" = 1 ]; then
  extra+=(-DDTL_BUILD_LAUNCHER=OFF "-DDTL_CLI11_INCLUDE_DIR=$PWD/gpu-kit/include")
  targets=(dtl-train)
fi
if [ "${CHECK_ONLY:-0}" = 1 ]; then
  extra+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
fi
# -U: find libtorch's libraries again in the order above, even in a folder configured before.
cmake -S . -B "$build" -UTORCH_LIBRARY -Uc10_LIBRARY -UC10_CUDA_LIBRARY -DCMAKE_BUILD_TYPE=Release -DDTL_BUILD_TESTS=OFF -DDTL_BUILD_TRAINER=ON -DDTL_WITH_NCCL=ON \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_root" -DCUDAToolkit_ROOT="$cuda_home" -DCMAKE_CUDA_COMPILER="$nvcc" \
  "${extra[@]}" "$@"
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
# Every libtorch/libc10 that dtl-train needs must be the wheel's (a mix links and then aborts at start).
if command -v readelf >/dev/null; then
  needed=$(readelf -d "$build/apps/dtl-train/dtl-train" | sed -n 's/.*NEEDED.*\[\(lib\(torch\|c10\)[^]]*\)\].*/\1/p')
  [ -n "$needed" ] || { echo "build-cuda.sh: dtl-train needs no libtorch: not the build this script makes" >&2; exit 1; }
  for lib in $needed; do
    [ -e "$torch_root/lib/$lib" ] || { echo "build-cuda.sh: dtl-train needs $lib, which is not the wheel's ($torch_root/lib)" >&2; exit 1; }
  done
else
  echo "build-cuda.sh: no readelf here: which libtorch dtl-train links is not checked"
fi
echo "build-cuda.sh: built ${targets[*]} in $build (dtl-train with NCCL)"
