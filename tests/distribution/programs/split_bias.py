"""A Linear split in neither torch style (row-parallel weight, split bias) trains as DTensor
parameters under ModelParallel (batch=1 x model=2) and ends where one process ends.

Usage: python split_bias.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import distrib
from distrib import distribution

STEPS, BATCH = 3, 16


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4)).double()


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(BATCH, 6, generator=g, dtype=torch.float64),
            torch.randint(0, 4, (BATCH,), generator=g))


def oracle() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = build()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data()
    for _ in range(STEPS):
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    return dict(net.state_dict())


def main() -> None:
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"),
                                   distribution.list_devices("cpu", count=2))
    layout_map = distribution.LayoutMap(mesh)
    layout_map["2.weight"] = (None, "model")
    layout_map["2.bias"] = ("model",)
    dist = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    strategy = dist.strategy
    rid = strategy.extended.replica_group.replica_id
    torch.manual_seed(0 if rid == 0 else 5)  # the chief's values must win
    with dist.scope():
        net = build()
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data()

    def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        distrib.compute_average_loss(per_example, global_batch_size=BATCH).backward()
        opt.step()
        opt.zero_grad()

    def rows(t: torch.Tensor) -> object:
        half = BATCH // 2
        return lambda c: t[c.replica_id_in_sync_group * half:(c.replica_id_in_sync_group + 1) * half]

    for _ in range(STEPS):
        strategy.run(step, args=(strategy.experimental_distribute_values_from_function(rows(x)),
                                 strategy.experimental_distribute_values_from_function(rows(y))))
    got = strategy.extended.module_state_dict(net)
    expected = oracle()
    bias = net[2].bias
    report = {"diff": max(float((got[k] - expected[k]).abs().max()) for k in expected),
              "bias_local": list(bias.to_local().shape), "bias": list(bias.shape)}
    if strategy.extended.should_checkpoint:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
