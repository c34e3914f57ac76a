#!/usr/bin/env bash
# Installs what dtlaunch needs, from Debian's packages. Idempotent: packages already present are not
# fetched again, and apt-get runs only when something is missing.
#   scripts/setup.sh        everything: the build, every test (scripts/test.sh) and the packages
#   scripts/setup.sh demo   what scripts/demo.sh needs: the compiler, CMake, dtlaunch's libraries,
#                           dtl-train's libtorch and Gloo, OpenBLAS, and PyTorch for the demo's workers
set -euo pipefail

demo_packages=(
  cmake g++ make pkg-config
  libcli11-dev libyaml-cpp-dev libboost-dev libspdlog-dev   # dtlaunch's libraries
  libssl-dev   # HMAC for the authenticated rendezvous
  libexpected-dev   # Result<T> (base/error.h): tl::expected, as C++20 has no std::expected
  python3 python3-torch   # the demo's PyTorch workers; the end-to-end tests with a real PyTorch script, and torchrun for benchmarks
  libtorch-dev libgloo-dev   # dtl-train, the reference worker (CPU build with Gloo)
  libopenblas0-pthread   # libtorch's CPU matrix products: Debian's default reference BLAS is ~20x slower
)
packages=(
  "${demo_packages[@]}"
  catch2   # the unit tests
  iproute2 procps nftables   # network namespaces, and their firewall (test_netns.py)
  openssh-server pdsh   # sshd in namespaces for the ssh fan-out (test_sshnet.py), pdsh for its benchmark and DeepSpeed's launcher (test_fanout_deepspeed.py)
  slurm-wlm slurm-client munge   # a real Slurm in namespaces (test_slurm.py), scontrol (test_hostlist.py)
  openmpi-bin   # mpirun starting dtlaunch (test_mpirun.py)
  zsh   # the zsh completion's syntax check and completion test (test_completion.py)
  clang-format   # the style check of the files .clang-format-covered lists (scripts/check-format.sh)
  elfutils   # eu-stack: a hung native worker's stack (docs/hangs.md)
  python3-seccomp   # a real seccomp filter that denies ptrace, for the stacks without it (test_hangs.py)
  dpkg-dev python3-venv   # the .deb's Depends (dpkg-shlibdeps) and the pip wheel's build (scripts/package.sh)
  tmux   # drives `dtlaunch top` in a terminal as a person would (test_top.py)
  prometheus   # a real Prometheus scrapes --metrics_port, and promtool checks the page (test_metrics.py)
)

case "${1:-all}" in
  all) ;;
  demo) packages=("${demo_packages[@]}") ;;
  *)
    echo "usage: scripts/setup.sh [demo]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
