"""``import distrib, torch``: torch is not imported yet when distrib reads the random state.

Usage: python random_state_distrib_first.py OUT_DIR
Draws with torch's unseeded generator before and after creating a 2-device
MirroredStrategy (each process's own seed would differ without distrib); each replica
writes OUT_DIR/replica<i>.json.
"""

import json
import sys
from pathlib import Path

# isort: off
import distrib  # the order this program tests
import torch
# isort: on

before = {"torch": torch.rand(2).tolist(), "loader": type(torch.__loader__).__name__}
strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
after = {"torch": torch.randn(2).tolist()}
rid = strategy.experimental_local_results(strategy.run(
    lambda: distrib.get_replica_context().replica_id_in_sync_group))[0]
Path(sys.argv[1], f"replica{rid}.json").write_text(json.dumps({"before": before, "after": after}))
