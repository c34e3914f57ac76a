#!/usr/bin/env bash
# The oracle for dtlaunch's accelerate parity: the current torch, accelerate, deepspeed and torchao from
# PyPI, in a venv OUTSIDE the repository (torch's wheel with its CUDA libraries is ~3 GB).
#   scripts/parity/make_venv.sh [VENV]     default: $DTL_ACCELERATE_VENV, else ~/.cache/dtlaunch/venv-accelerate
set -euo pipefail
venv=${1:-${DTL_ACCELERATE_VENV:-$HOME/.cache/dtlaunch/venv-accelerate}}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch accelerate
# fp8 runs need one of transformer-engine, MS-AMP or torchao (accelerate refuses fp8 without); torchao is pure Python.
"$venv/bin/pip" install -q torchao
# accelerate's DeepSpeed launcher imports deepspeed; its ops are built at run time, never here.
DS_BUILD_OPS=0 "$venv/bin/pip" install -q deepspeed || echo "deepspeed did not install: the DeepSpeed cases will be skipped" >&2
"$venv/bin/python" -c 'import accelerate, torch; print("venv", "'"$venv"'", "accelerate", accelerate.__version__, "torch", torch.__version__)'
