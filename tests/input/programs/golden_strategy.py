"""Golden cases through a real strategy: batches and ``reduce(MEAN, axis=0)`` per step.

Usage: python golden_strategy.py mirrored|multi_worker OUT_DIR KEYS_FILE FILES_DIR
Runs every golden case named in KEYS_FILE (a JSON list) with
``MirroredStrategy(devices=["cpu:0", "cpu:1"])`` or ``MultiWorkerMirroredStrategy``
(under TF_CONFIG) and writes OUT_DIR/replica<id>.json: for each case, this replica's
batch of every step and the strategy's per-step mean.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import distrib  # noqa: E402
from tests.input.golden.grid import parse_key  # noqa: E402
from tests.input.helpers import as_lists  # noqa: E402
from tests.input.test_golden import distributed, value  # noqa: E402


def run_case(s: distrib.Strategy, case: dict[str, Any], root: Path) -> dict[str, Any]:
    steps, means = [], []
    for batch in distributed(case, root, s):
        steps.append(as_lists(s.experimental_local_results(value(batch))[0]))
        rows = batch[0] if case["src"] == "slices" else \
            s.run(lambda v: v.to(torch.float64), args=(batch,))
        means.append(as_lists(s.reduce("MEAN", rows, axis=0)))
    return {"s": steps, "m": means}


def main() -> None:
    kind, out, keys_file, root = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    s = (distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]) if kind == "mirrored"
         else distrib.MultiWorkerMirroredStrategy())
    keys = json.loads(Path(keys_file).read_text())
    seen = {key: run_case(s, parse_key(key), root) for key in keys}
    rid = s.experimental_local_results(
        s.experimental_distribute_values_from_function(lambda c: c.replica_id_in_sync_group))[0]
    (out / f"replica{rid}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
