"""What a strategy does with parameters it did not set up, or could not set up yet.

Usage: python parameter_rules.py STRATEGY SCENARIO
STRATEGY: mirrored | central_storage
SCENARIO:
  outside_scope  a plain nn.Module created before the scope, an optimizer created inside
                 it, trained in a custom loop: the first step must raise, on every replica
  set_up         the same, with the module created inside the scope: trains

Every replica prints one JSON line: the error it raised (type and message) or none.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

import distrib


def main() -> None:
    kind, scenario = sys.argv[1], sys.argv[2]
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"]) if kind == "mirrored" \
        else distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    rid = strategy.extended.replica_group.replica_id
    torch.manual_seed(rid)
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
    except distrib.errors.UsageError as e:
        error = {"type": type(e).__name__, "message": str(e)}
    print(json.dumps({"replica": rid, "error": error,
                      "weight": net.weight.detach().tolist()}), flush=True)


if __name__ == "__main__":
    main()
