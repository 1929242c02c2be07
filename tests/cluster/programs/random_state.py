"""Draw random numbers before and after creating a 2-device MirroredStrategy.

Usage: python random_state.py OUT_DIR   (also run as `python -c "$(cat random_state.py)" OUT_DIR`)
torch's generator gets a fresh, process-specific seed before ``import distrib`` and
numpy's and random's are unseeded, so without distrib the replica processes would
draw different numbers.  Each replica writes OUT_DIR/replica<i>.json.
"""

import json
import random
import sys
from pathlib import Path

import torch

torch.seed()

import numpy as np  # noqa: E402

import distrib  # noqa: E402

before = {"numpy": np.random.rand(3).tolist(), "random": random.random(),
          "torch": torch.rand(2).tolist()}
strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
after = {"numpy": np.random.randint(0, 1 << 30, 2).tolist(), "torch": torch.randn(2).tolist()}
rid = strategy.experimental_local_results(strategy.run(
    lambda: distrib.get_replica_context().replica_id_in_sync_group))[0]
Path(sys.argv[1], f"replica{rid}.json").write_text(json.dumps({"before": before, "after": after}))
