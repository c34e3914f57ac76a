#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: 4 workers on 4 fake GPUs, each joining a real
# PyTorch gloo process group from dtlaunch's environment and showing where it sits.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
echo
echo "$ dtlaunch --standalone --fake_gpus 4 --nproc_per_node gpu scripts/demo_worker.py"
PYTHON_EXEC=/usr/bin/python3 build/apps/dtlaunch/dtlaunch --standalone --fake_gpus 4 --nproc_per_node gpu \
  scripts/demo_worker.py
