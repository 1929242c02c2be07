"""What the ParameterServerStrategy programs ``oracle.py`` and ``checkpoint.py`` share:
their strategy (variables in 2 shards), float64 model, optimizer, batches and step.

The programs run as scripts, so this folder is ``sys.path[0]`` and they import it as
``ps_setup``.
"""

from __future__ import annotations

import torch
from torch import nn

import distrib

BATCH = 8


def ps_strategy() -> distrib.ParameterServerStrategy:
    """ParameterServerStrategy with every variable in 2 shards (one per ps task)."""
    return distrib.ParameterServerStrategy(
        variable_partitioner=distrib.FixedShardsPartitioner(2))


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).double()


def sgd(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)


def batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches of BATCH rows of 6 float64 features and 3 classes (seeded)."""
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 6, dtype=torch.float64, generator=gen),
             torch.randint(0, 3, (BATCH,), generator=gen)) for _ in range(steps)]


def train_step(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()
