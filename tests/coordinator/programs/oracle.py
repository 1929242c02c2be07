"""ParameterServerStrategy with one worker equals one process training on the same batches.

Run on every task of {chief: 1, worker: 1, ps: 2}; the chief writes a JSON report to argv[1].
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
from ps_setup import batches, build, ps_strategy, sgd, train_step

from distrib.coordinator import ClusterCoordinator

STEPS = 12


def main() -> None:
    strategy = ps_strategy()
    torch.manual_seed(0)
    with strategy.scope():
        net = build()
        opt = sgd(net)
    initial = copy.deepcopy(net.state_dict())
    data = batches(STEPS)
    coordinator = ClusterCoordinator(strategy)
    losses = [coordinator.schedule(train_step, args=(net, opt, x, y)) for x, y in data]
    coordinator.join()

    oracle = build()
    oracle.load_state_dict(initial)
    oracle_opt = sgd(oracle)
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
