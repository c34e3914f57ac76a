#!/bin/sh
# dtlaunch vs torchrun, side by side: launch time, launcher memory, failure-to-exit latency,
# --tee output throughput (with a lost/torn line check) and idle supervision CPU.
#
#   scripts/bench/run_all.sh [--only launch,memory,failure,throughput,idle] [--no-tuned]
#
# DTLAUNCH: the dtlaunch binary (default: build/apps/dtlaunch/dtlaunch under the repository root)
# TORCHRUN_PYTHON: the Python with torch for torchrun (default /usr/bin/python3, Debian's torch 1.13)
# Exit status 1 when a dtlaunch correctness check fails; a missed speed goal only prints MISS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
DTLAUNCH=${DTLAUNCH:-$repo/build/apps/dtlaunch/dtlaunch}
if [ ! -x "$DTLAUNCH" ]; then
  echo "run_all.sh: dtlaunch not found at $DTLAUNCH" >&2
  echo "run_all.sh: build it with 'cmake --build $repo/build -j2' or set DTLAUNCH=/path/to/dtlaunch" >&2
  exit 2
fi
export DTLAUNCH
py=/usr/bin/python3
[ -x "$py" ] || py=python3
status=0
"$py" "$here/bench.py" "$@" || status=$?
# Rendezvous time vs nodes with torchrun's c10d, node loss, server memory; not with --only.
case " $* " in *" --only"*) ;; *) "$py" "$here/rendezvous.py" || status=$? ;; esac
exit $status
