"""A training loop that runs until it is killed (for the lost-peer tests).

Usage: python long_train.py [TIMEOUT_SECONDS|default] [stuck]
Prints "step N" after each step.  With "stuck", replica 1 stops calling collectives
at step 3 (alive but not participating) and sleeps.
"""

from __future__ import annotations

import sys
import time

import torch

import distrib

timeout = None if sys.argv[1] == "default" else float(sys.argv[1])
stuck = len(sys.argv) > 2 and sys.argv[2] == "stuck"
strategy = distrib.MultiWorkerMirroredStrategy(
    communication_options=distrib.CommunicationOptions(timeout_seconds=timeout))
rid = strategy.extended.replica_group.replica_id
with strategy.scope():
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)


def step(x: torch.Tensor) -> torch.Tensor:
    loss = distrib.compute_average_loss(net(x).pow(2).sum(1), global_batch_size=8)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


for i in range(100_000):
    if stuck and rid == 1 and i == 3:
        print("stuck", flush=True)
        time.sleep(3600)
    loss = strategy.run(step, args=(torch.randn(4, 8),))
    strategy.reduce("sum", loss, axis=None)
    print(f"step {i}", flush=True)
    time.sleep(0.05)
