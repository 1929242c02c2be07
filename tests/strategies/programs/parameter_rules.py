"""What a strategy does with parameters it did not set up, or could not set up yet.

Usage: python parameter_rules.py STRATEGY SCENARIO
STRATEGY: mirrored | central_storage | one (no strategy)
SCENARIO:
  outside_scope  a plain nn.Module created before the scope, an optimizer created inside
                 it, trained in a custom loop: the first step must raise, on every replica
  set_up         the same, with the module created inside the scope: trains
  lazy_fit       Keras' Dense(64) habit: a model of nn.LazyLinear layers compiled in the
                 scope and trained by fit (its weights are created by the first batch)

Every replica prints one JSON line: the error it raised (type and message) or none.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import distrib


def say(report: dict[str, object]) -> None:
    """One line in one write: the replicas share the terminal (print writes twice)."""
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def main() -> None:
    kind, scenario = sys.argv[1], sys.argv[2]
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]) if kind == "mirrored" \
        else distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"]) \
        if kind == "central_storage" else distrib.get_strategy()
    rid = strategy.extended.replica_group.replica_id
    torch.manual_seed(rid)
    if scenario == "lazy_fit":
        lazy_fit(strategy, rid)
        return
    if scenario == "outside_scope":
        net = nn.Linear(3, 1)
        with strategy.scope():
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
    else:
        with strategy.scope():
            net = nn.Linear(3, 1)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> None:
        net(x).sum().backward()
        opt.step()
        opt.zero_grad()

    error = None
    try:
        for _ in range(2):
            strategy.run(step, args=(torch.ones(2, 3) * (rid + 1),))
    except distrib.errors.DistribError as e:  # this replica's, or another's reported here
        error = {"type": type(e).__name__, "message": str(e)}
    say({"replica": rid, "error": error, "weight": net.weight.detach().tolist()})


def lazy_fit(strategy: distrib.Strategy, rid: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g, dtype=torch.float64)
    y = torch.randn(40, 2, generator=g, dtype=torch.float64)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.LazyLinear(8), nn.Tanh(), nn.LazyLinear(2))
                              .double())
        model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                      loss="mse")
    torch.manual_seed(3 + rid)  # the chief's lazy weights are one process's
    model.fit(x.numpy(), y.numpy(), batch_size=16, epochs=2, verbose=0, shuffle=False)
    say({"replica": rid, "error": None,
         "weights": [p.detach().reshape(-1).tolist() for p in model.parameters()]})


if __name__ == "__main__":
    main()
