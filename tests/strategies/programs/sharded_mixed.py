"""ShardedStrategy under the mixed-precision policies: fit trains (the loss falls) with
float32 sharded parameters, bfloat16 and float16 (with loss scaling) computation.

Usage: python sharded_mixed.py OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np
from torch import nn

import distrib


def main() -> None:
    strategy = distrib.ShardedStrategy(devices=["cpu:0", "cpu:1"], min_unit_params=100)
    rng = np.random.RandomState(0)
    x = rng.rand(256, 8).astype("float32")
    y = (x.sum(1) * 3 / 8).astype("int64").clip(0, 2)
    report = {}
    for policy in ("mixed_bfloat16", "mixed_float16"):
        distrib.mixed_precision.set_global_policy(policy)
        with strategy.scope():
            model = distrib.Model(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)))
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=32, epochs=3, verbose=0)
        weight = model.module[0].weight
        report[policy] = {"loss": history.history["loss"], "weight": type(weight).__name__,
                          "dtype": str(weight.dtype),
                          "local_rows": int(weight.to_local().shape[0])}
    distrib.mixed_precision.set_global_policy("float32")
    if strategy.extended.should_checkpoint:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
