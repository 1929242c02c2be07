"""Custom training loops fed by distributed datasets, under a real strategy.

Usage: python strategy_input.py STRATEGY OUT_DIR PHASE
STRATEGY: multi_worker | mirrored | one_device
PHASE:
  first   trains three models: "full" for 3 epochs of experimental_distribute_dataset
          (30 rows, global batch 8: a final partial batch each epoch), "part" for 1.5
          epochs then saves model + iterator state, "uneven" for 1 epoch of
          distribute_datasets_from_function with shards of 11 and 7 rows (per-replica
          batch 4: one shard has one batch more, and a partial one);
  resume  loads the saved state and finishes "part" to the end of epoch 3.
Every replica writes OUT_DIR/<PHASE>-<replica>.json: the row ids of each of its steps
and the final parameters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib
from distrib.data import Dataset

ROWS, GLOBAL_BATCH, EPOCHS = 30, 8, 3


def data(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return torch.arange(n), x, x @ torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) + 0.5


def pipeline() -> Dataset:
    return Dataset.from_tensor_slices(data(ROWS)).shuffle(ROWS, seed=11).batch(GLOBAL_BATCH)


def uneven_fn(ctx: distrib.input.InputContext) -> Dataset:
    lo, hi = (0, 11) if ctx.input_pipeline_id == 0 else (11, 18)
    ids, x, y = data(18)
    per_replica = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
    return Dataset.from_tensor_slices((ids[lo:hi], x[lo:hi], y[lo:hi])).batch(per_replica)


class Trainer:
    def __init__(self, strategy: distrib.Strategy) -> None:
        self.strategy = strategy
        torch.manual_seed(0)
        with strategy.scope():
            self.net = nn.Linear(3, 1).double()
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        with torch.no_grad():            # the oracle (tests/input/helpers.py) starts at zero
            for p in self.net.parameters():
                p.zero_()
        self.steps: list[list[int]] = []

    def _step(self, batch: Any) -> torch.Tensor:
        ids, x, y = batch
        per_example = (self.net(x).squeeze(-1) - y) ** 2
        loss = distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return loss

    def step(self, batch: Any) -> None:
        ids = self.strategy.experimental_local_results(batch[0])[0]
        self.steps.append(ids.tolist())
        self.strategy.run(self._step, args=(batch,))

    def params(self) -> list[float]:
        return [float(v) for p in self.net.parameters() for v in p.detach().flatten()]


def make_strategy(kind: str) -> distrib.Strategy:
    if kind == "multi_worker":
        return distrib.MultiWorkerMirroredStrategy()
    if kind == "mirrored":
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    return distrib.OneDeviceStrategy("cpu:0")


def first(strategy: distrib.Strategy, out: Path) -> dict[str, Any]:
    full, part = Trainer(strategy), Trainer(strategy)
    full_ds = strategy.experimental_distribute_dataset(pipeline())
    for _ in range(EPOCHS):
        for batch in full_ds:
            full.step(batch)
    part_ds = strategy.experimental_distribute_dataset(pipeline())
    for batch in part_ds:
        part.step(batch)
    it = iter(part_ds)
    for _ in range(2):
        part.step(next(it))
    if strategy.extended.should_checkpoint:
        torch.save({"net": part.net.state_dict(), "data": it.state_dict()}, out / "ckpt.pt")
    uneven = Trainer(strategy)
    for batch in strategy.distribute_datasets_from_function(uneven_fn):
        uneven.step(batch)
    return {"full": [full.steps, full.params()], "part": [part.steps, part.params()],
            "uneven": [uneven.steps, uneven.params()]}


def resume(strategy: distrib.Strategy, out: Path) -> dict[str, Any]:
    saved = torch.load(out / "ckpt.pt", weights_only=True)
    part = Trainer(strategy)
    part.net.load_state_dict(saved["net"])
    part_ds = strategy.experimental_distribute_dataset(pipeline())
    part_ds.load_state_dict(saved["data"])
    for _ in range(saved["data"]["epoch"], EPOCHS):
        for batch in part_ds:
            part.step(batch)
    return {"part": [part.steps, part.params()]}


def main() -> None:
    kind, out, phase = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    strategy = make_strategy(kind)
    result = first(strategy, out) if phase == "first" else resume(strategy, out)
    rid = strategy.extended.replica_group.replica_id
    (out / f"{phase}-{rid}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
