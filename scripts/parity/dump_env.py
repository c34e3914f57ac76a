"""The parity worker: writes its environment and arguments to $PARITY_OUT/worker.<RANK>.json and exits.

Run by `accelerate launch` (scripts/parity/accelerate_goldens.py) and by `dtlaunch launch`
(tests/e2e/test_accelerate_parity.py) alike, so that both are read the same way."""
import json
import os
import sys

out = os.environ["PARITY_OUT"]
rank = os.environ.get("RANK", "single")  # accelerate's simple launcher gives no RANK
with open(os.path.join(out, "worker.%s.json" % rank), "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv[1:]}, f, indent=1, sort_keys=True)
