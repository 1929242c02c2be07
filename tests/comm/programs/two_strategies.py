"""Create a 2-device MirroredStrategy, then a second one; record what each replica saw.

Usage: python two_strategies.py OUT_DIR   -> OUT_DIR/replica<i>.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import distrib

first = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
try:
    distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    second = ["no error", ""]
except Exception as exc:  # recorded for the test
    second = [type(exc).__name__, str(exc)]
total = first.reduce("sum", first.run(lambda: torch.ones(1)), axis=None)
rid = first.experimental_local_results(first.run(
    lambda: distrib.get_replica_context().replica_id_in_sync_group))[0]
Path(sys.argv[1], f"replica{rid}.json").write_text(json.dumps(
    {"second": second, "first_still_works": total.tolist()}))
