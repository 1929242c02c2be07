"""A Checkpoint under ParameterServerStrategy: variables and optimizer slots on the ps tasks.

Run on every task of {chief: 1, worker: 1, ps: 2}; the chief writes a JSON report to
argv[1] and its checkpoints under argv[2].  Training after a restore must end bitwise
where training after the save ended: the momentum, sharded over 2 ps, comes back too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator

BATCH = 8


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
        net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()
        opt = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(BATCH, 6, dtype=torch.float64, generator=gen),
             torch.randint(0, 3, (BATCH,), generator=gen)) for _ in range(6)]
    coordinator = ClusterCoordinator(strategy)

    def train() -> list[torch.Tensor]:
        for x, y in data:
            coordinator.schedule(train_step, args=(net, opt, x, y))
        coordinator.join()
        return [t.clone() for t in strategy.extended.module_state_dict(net).values()]

    train()
    path = checkpoint.save(f"{sys.argv[2]}/ckpt")
    after_save = train()
    train()  # move away
    checkpoint.restore(path).assert_consumed()
    after_restore = train()
    Path(sys.argv[1]).write_text(json.dumps({
        "resumed_equal": all(torch.equal(a, b) for a, b in zip(after_save, after_restore)),
        "slots_saved": len(strategy.extended.optimizer_state_dict(opt)["state"]),
    }))


if __name__ == "__main__":
    main()
