#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job on fake GPUs (no GPU needed): first 4 PyTorch
# workers joining one gloo process group from dtlaunch's environment and showing where each sits,
# then dtl-train, the libtorch reference worker, training a small transformer data-parallel on 2.
# It installs only what it uses (scripts/setup.sh demo) and builds without the tests; scripts/test.sh
# installs the rest and builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo
scripts/build.sh -DDTL_BUILD_TESTS=OFF
dtlaunch=build/apps/dtlaunch/dtlaunch
echo
echo "$ dtlaunch --standalone --fake_gpus 4 --nproc_per_node gpu scripts/demo_worker.py"
PYTHON_EXEC=/usr/bin/python3 "$dtlaunch" --standalone --fake_gpus 4 --nproc_per_node gpu scripts/demo_worker.py
echo
echo "$ dtlaunch --standalone --fake_gpus 2 --nproc_per_node gpu --no_python dtl-train --preset tiny --steps 40"
"$dtlaunch" --standalone --fake_gpus 2 --nproc_per_node gpu --no_python build/apps/dtl-train/dtl-train \
  --preset tiny --steps 40 --log_every 10
