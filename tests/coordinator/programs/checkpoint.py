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
from ps_setup import batches, build, ps_strategy, sgd, train_step

import distrib
from distrib.coordinator import ClusterCoordinator


def main() -> None:
    strategy = ps_strategy()
    torch.manual_seed(0)
    with strategy.scope():
        net = build()
        opt = sgd(net)
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    data = batches(6)
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
