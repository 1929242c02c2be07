"""fit on a user's torch DataLoader, run unchanged on one process and on 2 replicas.

Usage: python loader_program.py MODE OUT
MODE: oracle | mirrored | multi_worker | distributed_sampler | wrong_sampler | iterable
The loader has 2 workers (each touches OUT.worker-<pid>), shuffles, and collates
dictionaries into ``(x, y)`` tuples with a ``collate_fn``; 21 examples in batches of 4
leave a final batch of 1 (replica 1 gets an empty share). Saves the weights and history.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

import distrib

N = 21


class Rows(Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.tensor([i / N, (i % 5) / 5.0, 1.0], dtype=torch.float64)
        return {"x": x, "y": x[:2].sum(dim=0, keepdim=True) * 3.0 - 1.0}


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __iter__(self) -> Any:
        for i in range(N):
            row = Rows()[i]
            yield row["x"], row["y"]


def collate(items: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([d["x"] for d in items]), torch.stack([d["y"] for d in items])


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "oracle":
        strategy = distrib.get_strategy()
    elif mode == "multi_worker":
        strategy = distrib.MultiWorkerMirroredStrategy()
    else:
        strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])

    def mark(worker: int) -> None:
        open(f"{out}.worker-{os.getpid()}", "w").close()

    common: dict[str, Any] = {"num_workers": 2, "worker_init_fn": mark}
    if mode in ("distributed_sampler", "wrong_sampler"):
        sampler = DistributedSampler(Rows(), num_replicas=3 if mode == "wrong_sampler" else 2,
                                     rank=strategy.extended.replica_group.replica_id,
                                     shuffle=False)
        loader = DataLoader(Rows(), batch_size=2, sampler=sampler, collate_fn=collate,
                            **common)
    elif mode == "iterable":
        loader = DataLoader(Stream(), batch_size=4, **common)
    else:
        loader = DataLoader(Rows(), batch_size=4, shuffle=True, collate_fn=collate, **common)
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(3, 1).double())
        model.compile(optimizer=distrib.optimizers.SGD(0.1, momentum=0.5), loss="mse")
    try:
        history = model.fit(loader, epochs=2, verbose=0)
    except distrib.errors.UsageError as e:
        print(f"UsageError: {e}", flush=True)
        return
    rank = strategy.extended.replica_group.replica_id if strategy.num_replicas_in_sync > 1 \
        else 0
    torch.save({"weights": {k: v.detach().clone() for k, v in model.module.state_dict().items()},
                "loss": history.history["loss"]}, f"{out}.rank{rank}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
