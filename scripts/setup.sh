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
  python3 python3-venv python3-torch   # the demo's PyTorch workers (python3-venv: py-spy's venv, below); the end-to-end tests with a real PyTorch script, and torchrun for benchmarks
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
  dpkg-dev   # the .deb's Depends (dpkg-shlibdeps); the pip wheel's build needs python3-venv too (scripts/package.sh)
  tmux   # drives `dtlaunch top` in a terminal as a person would (test_top.py)
  prometheus   # a real Prometheus scrapes --metrics_port, and promtool checks the page (test_metrics.py)
)

# py-spy, which reads a hung Python rank's stack (docs/hangs.md), is not packaged in Debian 12: it
# comes from PyPI (a static binary wheel) into a venv of its own, linked into /usr/local/bin. Without
# PyPI it is left out, and dtlaunch reads Python stacks through faulthandler instead.
install_py_spy() {
  command -v py-spy >/dev/null && return 0
  local venv=/opt/dtlaunch/py-spy sudo="" python=/usr/bin/python3
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  [ -x "$python" ] || python=python3
  if $sudo "$python" -m venv "$venv" >/dev/null 2>&1 &&
    $sudo "$venv/bin/pip" install -q --disable-pip-version-check "py-spy==0.4.3" >/dev/null 2>&1; then
    $sudo ln -sf "$venv/bin/py-spy" /usr/local/bin/py-spy
    echo "setup: py-spy installed ($venv, linked into /usr/local/bin)"
  else
    echo "setup: py-spy could not be installed from PyPI: hung Python ranks' stacks come from faulthandler" >&2
  fi
}

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
  install_py_spy
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
install_py_spy
