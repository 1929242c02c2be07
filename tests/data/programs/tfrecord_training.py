"""A custom training loop over TFRecord files, under a real strategy.

Usage: python tfrecord_training.py STRATEGY DATA_DIR OUT_DIR
STRATEGY: mirrored | one_device | multi_worker

The pipeline a TensorFlow user writes::

    TFRecordDataset(files).map(parse).cache(OUT_DIR/cache/<STRATEGY>)
        .padded_batch(8, padded_shapes={"id": [], "tokens": [MAXLEN], "raw": [None], "y": []})

fed to ``experimental_distribute_dataset`` for 3 epochs of SGD on a float64
linear model (starting at zero; the loss is ``compute_average_loss`` over the
global batch).  Every replica writes OUT_DIR/<STRATEGY>-<replica>.json: the
example ids and the padded width of "raw" at each step, the number of records
parsed in each epoch, and the final parameters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib
from distrib.data import TFRecordDataset
from distrib.data.experimental import (
    FixedLenFeature,
    VarLenFeature,
    parse_single_example,
)

GLOBAL_BATCH, MAXLEN, EPOCHS = 8, 5, 3
FEATURES = {"id": FixedLenFeature([], torch.int64), "tokens": VarLenFeature(torch.float32),
            "y": FixedLenFeature([], torch.float32)}
parsed = [0]


def parse(record: bytes) -> dict[str, Any]:
    parsed[0] += 1
    ex = parse_single_example(record, FEATURES)
    return {"id": ex["id"], "tokens": ex["tokens"], "raw": ex["tokens"], "y": ex["y"]}


def make_strategy(kind: str) -> distrib.Strategy:
    if kind == "multi_worker":
        return distrib.MultiWorkerMirroredStrategy()
    if kind == "mirrored":
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    return distrib.OneDeviceStrategy("cpu:0")


def main() -> None:
    kind, data, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    strategy = make_strategy(kind)
    files = sorted(str(p) for p in data.glob("*.tfrecord"))
    ds = (TFRecordDataset(files).map(parse).cache(str(out / "cache" / kind))
          .padded_batch(GLOBAL_BATCH, padded_shapes={"id": [], "tokens": [MAXLEN], "raw": [None],
                                                     "y": []}))
    with strategy.scope():
        net = nn.Linear(MAXLEN, 1).double()
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()

    def step(batch: dict[str, torch.Tensor]) -> None:
        pred = net(batch["tokens"].double()).squeeze(-1)
        per_example = (pred - batch["y"].double()) ** 2
        distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH).backward()
        opt.step()
        opt.zero_grad()

    dist = strategy.experimental_distribute_dataset(ds)
    steps, widths, calls = [], [], []
    for _ in range(EPOCHS):
        before = parsed[0]
        for batch in dist:
            local = strategy.experimental_local_results(batch)[0]
            steps.append(local["id"].tolist())
            widths.append(int(local["raw"].shape[1]))
            strategy.run(step, args=(batch,))
        calls.append(parsed[0] - before)
    rid = strategy.extended.replica_group.replica_id
    params = [float(v) for p in net.parameters() for v in p.detach().flatten()]
    (out / f"{kind}-{rid}.json").write_text(json.dumps(
        {"steps": steps, "widths": widths, "calls": calls, "params": params}))


if __name__ == "__main__":
    main()
