"""Values that differ between replicas, given to reduce/gather/all_reduce, on 2 replicas.

Usage: python mismatch.py OUT_DIR
Each replica records, per scenario, the error it raised ([type, message]) or the value
it got, and writes OUT_DIR/replica<i>.json.  The group must stay usable after every
error (the last scenario reduces again).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except Exception as exc:  # recorded for the test
        return [type(exc).__name__, str(exc)]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2).double()

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        return {"logits": y, "parts": (y[:, :1], y.sum(1) > 0)}


def predict_matches(s: distrib.Strategy) -> list[float]:
    torch.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(10, 3))
    with s.scope():
        model = distrib.Model(TwoHeads())
        model.compile(optimizer="sgd", loss="mse")
    pred = model.predict(x, batch_size=4, verbose=0)
    with torch.no_grad():
        direct = model.module(torch.from_numpy(x))
    return [float(abs(pred["logits"] - direct["logits"].numpy()).max()),
            float(abs(pred["parts"][0] - direct["parts"][0].numpy()).max()),
            float((pred["parts"][1] != direct["parts"][1].numpy()).sum()),
            float(pred["parts"][1].dtype == np.bool_), len(pred["logits"])]


def main(out: Path) -> None:
    s = distrib.MirroredStrategy(["cpu:0", "cpu:1"],
                                 communication_options=distrib.CommunicationOptions(
                                     timeout_seconds=60))
    rid = int(s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().replica_id_in_sync_group))[0])
    x2 = torch.ones(2)

    def run(fn: Callable[[], Any]) -> Any:
        return s.run(fn)

    seen = {
        "keys": outcome(lambda: s.reduce("sum", run(lambda: {"a" if rid == 0 else "b": x2}),
                                         axis=None)),
        "shapes": outcome(lambda: s.reduce("sum", run(lambda: torch.ones(2 + rid)), axis=None)),
        "dtypes": outcome(lambda: s.reduce(
            "mean", run(lambda: torch.ones(2, dtype=torch.float32 if rid == 0
                                           else torch.float64)), axis=None)),
        "gather_trailing": outcome(lambda: s.gather(run(lambda: torch.ones(2, 3 + rid)), 0)),
        "gather_rows": outcome(lambda: s.gather(run(lambda: torch.full((1 + rid, 2), rid)), 0)),
        "axis_rows": outcome(lambda: s.reduce("sum", run(lambda: torch.ones(4 - 2 * rid, 2)),
                                              axis=0)),
        "replica_all_reduce": outcome(lambda: s.experimental_local_results(run(
            lambda: distrib.get_replica_context().all_reduce("sum", torch.ones(1 + rid))))),
        "none": outcome(lambda: s.reduce("sum", run(lambda: None), axis=None)),
        "none_leaf": outcome(lambda: s.reduce("sum", run(lambda: (x2, None)), axis=None)),
        "plain_mean": outcome(lambda: s.reduce("mean", torch.tensor([1.0 + 2 * rid]), axis=None)),
        "plain_sum": outcome(lambda: s.reduce("sum", torch.tensor([1.0 + 2 * rid]), axis=None)),
        "plain_number_mean": outcome(lambda: s.reduce("mean", 1.0 + 2 * rid, axis=None)),
        "predict": predict_matches(s),
        "still_usable": outcome(lambda: s.reduce("sum", run(lambda: torch.ones(1)), axis=None)),
    }
    (out / f"replica{rid}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
