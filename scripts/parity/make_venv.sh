#!/usr/bin/env bash
# The oracles that dtlaunch's tests run beside it: torch, accelerate, deepspeed and transformers from
# PyPI at pinned versions, in a venv OUTSIDE the repository (torch's wheel with its CUDA libraries is
# ~3 GB; the venv ~5 GB). Idempotent: a venv that already has these versions is left as it is.
#   scripts/parity/make_venv.sh [VENV]     default: $DTL_ACCELERATE_VENV, else ~/.cache/dtlaunch/venv-accelerate
# Exits non-zero when PyPI cannot be reached or the disk is too small; the tests that need the venv
# then show as skipped.
set -euo pipefail
venv=${1:-${DTL_ACCELERATE_VENV:-$HOME/.cache/dtlaunch/venv-accelerate}}
# torch's launcher (torchrun), accelerate launch and deepspeed as the tests compare against; torchao for
# accelerate's fp8 runs (it refuses fp8 without one of transformer-engine, MS-AMP or torchao).
pins=(torch==2.15.0 accelerate==1.15.0 transformers==5.24.0 torchao==0.18.0)
deepspeed_pin=deepspeed==0.19.8
check='import importlib.metadata as m, sys
want = dict(a.split("==") for a in sys.argv[1:])
have = {n: m.version(n) for n in want if __import__("importlib.util").util.find_spec(n.replace("-", "_"))}
sys.exit(0 if have == want else 1)'
# py-spy reads the workers' stacks when a job hangs (it installs a program, not a module).
pyspy_pin=py-spy==0.4.3
if [ -x "$venv/bin/python" ] && { [ -x "$venv/bin/py-spy" ] || "$venv/bin/pip" install -q --disable-pip-version-check "$pyspy_pin"; } &&
  "$venv/bin/python" -c "$check" "${pins[@]}" "$deepspeed_pin" 2>/dev/null; then
  echo "make_venv: $venv has ${pins[*]} $deepspeed_pin"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
free_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt 8000000 ] && [ ! -d "$venv" ]; then
  echo "make_venv: less than 8 GB free under $(dirname "$venv"): no oracle venv" >&2
  exit 1
fi
# Debian's interpreter when it has venv (python3-venv), else the first python3 on PATH.
python=/usr/bin/python3
"$python" -c 'import ensurepip, venv' 2>/dev/null || python=python3
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" "$pyspy_pin"
# accelerate's DeepSpeed launcher imports deepspeed; its ops are built at run time, never here.
DS_BUILD_OPS=0 "$venv/bin/pip" install -q --disable-pip-version-check "$deepspeed_pin" ||
  echo "make_venv: deepspeed did not install: the DeepSpeed cases will be skipped" >&2
"$venv/bin/python" -c 'import accelerate, torch, transformers; print("make_venv:", "'"$venv"'", "accelerate", accelerate.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
