"""ParameterServerStrategy with one worker equals one process training on the same batches.

Run on every task of {chief: 1, worker: 1, ps: 2}; the chief writes a JSON report to argv[1].
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator

STEPS, BATCH = 12, 8


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()


def train_step(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def main() -> None:
    strategy = distrib.ParameterServerStrategy(
        variable_partitioner=distrib.FixedShardsPartitioner(2))
    torch.manual_seed(0)
    with strategy.scope():
        net = build()
        opt = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)
    initial = copy.deepcopy(net.state_dict())
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(BATCH, 6, dtype=torch.float64, generator=gen),
             torch.randint(0, 3, (BATCH,), generator=gen)) for _ in range(STEPS)]
    coordinator = ClusterCoordinator(strategy)
    losses = [coordinator.schedule(train_step, args=(net, opt, x, y)) for x, y in data]
    coordinator.join()

    oracle = build()
    oracle.load_state_dict(initial)
    oracle_opt = torch.optim.SGD(oracle.parameters(), lr=0.2, momentum=0.9)
    oracle_losses = [float(train_step(oracle, oracle_opt, x, y)) for x, y in data]
    saved = strategy.extended.module_state_dict(net)
    report = {
        "max_param_diff": max(float((a - b).abs().max()) for a, b in
                              zip(net.state_dict().values(), oracle.state_dict().values())),
        "max_saved_diff": max(float((saved[k] - v).abs().max())
                              for k, v in oracle.state_dict().items()),
        "max_loss_diff": max(abs(float(r.fetch()) - o) for r, o in zip(losses, oracle_losses)),
        "placement": {k: v.tasks for k, v in strategy.extended.variable_placement(net).items()},
        "shard_names": [s.name for s in strategy.extended.variable_placement(net)["0.weight"]
                        .shards],
    }
    # Restoring a checkpoint writes the values back to the ps: the next step starts there.
    strategy.extended.load_module_state_dict(net, initial)
    coordinator.schedule(train_step, args=(net, opt, *data[0])).fetch()
    coordinator.join()
    report["changed_after_restore"] = float((net[0].weight - initial["0.weight"]).abs().max())
    Path(sys.argv[1]).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
