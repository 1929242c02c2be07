"""torchmetrics metrics in compile(metrics=...), run unchanged on one process and on 2 replicas.

Usage: python torchmetrics_program.py MODE OUT
MODE: oracle | mirrored
Fits and evaluates a float64 linear model on 21 examples in global batches of 4 (the
last one of 1 row: replica 1 gets an empty share) with torchmetrics' MeanAbsoluteError,
and R2Score made inside strategy.scope(); saves the history and the evaluation (every
replica).
"""

from __future__ import annotations

import sys

import torch
import torchmetrics

import distrib


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    strategy = distrib.get_strategy() if mode == "oracle" else \
        distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(21, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.1
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(Net())
        model.compile(optimizer=distrib.optimizers.SGD(0.05), loss="mse",
                      metrics=[torchmetrics.MeanAbsoluteError(), torchmetrics.R2Score()])
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    evaluation = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    rank = strategy.extended.replica_group.replica_id if strategy.num_replicas_in_sync > 1 \
        else 0
    torch.save({"history": history.history, "evaluate": evaluation}, f"{out}.rank{rank}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
