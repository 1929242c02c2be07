"""Model.get_weights / set_weights under ShardedStrategy and ModelParallel: whole arrays.

Usage: python sharded_weights.py KIND OUT.json   (KIND: sharded | model_parallel)
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from torch import nn

import distrib
from distrib import distribution


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "sharded":
        strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"],
                                                        min_unit_params=1)
        scope = strategy.scope
    else:
        mesh = distribution.DeviceMesh((1, 2), ("batch", "model"),
                                       distribution.list_devices("cpu", count=2))
        layout_map = distribution.LayoutMap(mesh)
        layout_map["0.weight"] = ("model", None)
        dist = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
        strategy, scope = dist.strategy, dist.scope
    torch.manual_seed(0)
    with scope():
        model = distrib.Model(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)))
    weights = model.get_weights()
    shapes = [list(w.shape) for w in weights]
    new = [np.full(w.shape, i + 1.0, dtype=w.dtype) for i, w in enumerate(weights)]
    model.set_weights(new)
    again = model.get_weights()
    report = {"shapes": shapes, "types": sorted({type(w).__name__ for w in weights}),
              "round_trip": all(np.array_equal(a, b) for a, b in zip(again, new))}
    if strategy.extended.should_checkpoint:
        with open(out, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
