"""CentralStorageStrategy under Model.fit: the oracle, state on the chief only, checkpoints.

Usage: python central_storage_fit.py OUT.json  (starts its second replica itself)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import distrib


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).double()


def fit(model: distrib.Model, x: np.ndarray, y: np.ndarray) -> None:
    model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.1, momentum=0.9),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)


def buffers_follow_their_modules(strategy: distrib.CentralStorageStrategy) -> bool:
    """Several set-up modules with buffers of one size: after each step every replica
    holds, in each module, the chief's buffers of that same module."""
    group = strategy.extended.replica_group
    torch.manual_seed(0)
    with strategy.scope():
        norms = [nn.BatchNorm1d(3).double() for _ in range(8)]
    opt = torch.optim.SGD([p for n in norms for p in n.parameters()], lr=0.1)
    x = torch.randn(8, 3, dtype=torch.float64) + group.replica_id

    def step() -> None:
        opt.zero_grad()
        sum((n(x * (i + 1)) ** 2).sum() for i, n in enumerate(norms)).backward()
        opt.step()

    for _ in range(2):
        strategy.run(step)
    flat = torch.cat([torch.cat([n.running_mean, n.running_var]) for n in norms])
    gathered = group.all_gather(flat.reshape(1, -1), 0)
    return bool(torch.equal(gathered[0], gathered[1]))


def main() -> None:
    strategy = distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    rng = np.random.RandomState(0)
    x, y = rng.rand(72, 8), rng.randint(0, 3, 72)
    torch.manual_seed(strategy.extended.replica_group.replica_id)  # differs: chief's wins
    with strategy.scope():
        model = distrib.Model(build())
    initial = copy.deepcopy(model.module.state_dict())
    fit(model, x, y)
    group = strategy.extended.replica_group
    flat = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    gathered = group.all_gather(flat.reshape(1, -1), 0)
    state_entries = len(model.optimizer.state)
    counts = group.all_gather(torch.tensor([state_entries]), 0).tolist()
    saved = strategy.extended.module_state_dict(model.module)
    buffers_equal = buffers_follow_their_modules(strategy)
    if not strategy.extended.should_checkpoint:
        return
    oracle = distrib.Model(build())
    oracle.module.load_state_dict(initial)
    fit(oracle, x, y)
    diff = max(float((a - b).abs().max()) for a, b in
               zip(model.module.state_dict().values(), oracle.module.state_dict().values()))
    restored = build()
    restored.load_state_dict(saved)
    Path(sys.argv[1]).write_text(json.dumps({
        "oracle_diff": diff,
        "replicas_equal": bool(torch.equal(gathered[0], gathered[1])),
        "optimizer_state_entries": counts,
        "restored_equal": all(torch.equal(a, b) for a, b in zip(
            restored.state_dict().values(), model.module.state_dict().values())),
        "parameter_devices": list(strategy.extended.parameter_devices),
        "buffers_follow_their_modules": buffers_equal,
    }))


if __name__ == "__main__":
    main()
