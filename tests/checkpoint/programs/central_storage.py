"""A Checkpoint of a model under CentralStorageStrategy: save, train on, restore, train again.

Usage: python central_storage.py CKPT_DIR OUT.json  (starts its second replica itself)

The optimizer's momentum lives on the chief only; restoring must give it back, so the
epoch trained after the restore ends bitwise where the epoch trained after the save did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import distrib


def main() -> None:
    directory, out = sys.argv[1], sys.argv[2]
    strategy = distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    rng = np.random.RandomState(0)
    x, y = rng.rand(64, 8), rng.randint(0, 3, 64)
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).double())
        model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
        checkpoint = distrib.Checkpoint(model=model)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    path = checkpoint.save(f"{directory}/ckpt")
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    after_save = [p.detach().clone() for p in model.parameters()]
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)  # move away
    checkpoint.restore(path).assert_consumed()
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    after_restore = [p.detach().clone() for p in model.parameters()]
    group = strategy.extended.replica_group
    flat = torch.cat([p.reshape(-1) for p in after_restore]).reshape(1, -1)
    gathered = group.all_gather(flat, 0)
    if strategy.extended.should_checkpoint:
        Path(out).write_text(json.dumps({
            "resumed_equal": all(torch.equal(a, b) for a, b in zip(after_save, after_restore)),
            "replicas_equal": bool(torch.equal(gathered[0], gathered[1])),
            "momentum_entries": len(model.optimizer.state),
        }))


if __name__ == "__main__":
    main()
