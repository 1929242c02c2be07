"""A fit with a Keras optimizer that transforms the gradients, run unchanged under strategies.

Usage: python keras_optimizer_program.py MODE OUT
MODE: oracle | oracle_unclipped | mirrored | central_storage
Trains a float64 linear model with ``distrib.optimizers.SGD`` (momentum, a piecewise
schedule, ``global_clipnorm`` small enough to clip every update, decoupled weight
decay but not on the bias, gradient accumulation over 2 steps, EMA), and saves the
weights after ``fit`` (the EMA weights), the history and the optimizer's iteration count.
``oracle_unclipped`` is the oracle without clipping (to show that clipping acts).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import distrib


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "mirrored":
        strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    elif mode == "central_storage":
        strategy = distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    else:
        strategy = distrib.get_strategy()
    rng = np.random.RandomState(0)
    x = rng.randn(48, 5)
    y = x @ rng.randn(5, 2) + 0.3
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(5, 2).double())
        opt = distrib.optimizers.SGD(
            distrib.optimizers.schedules.PiecewiseConstantDecay([4], [0.1, 0.05]),
            momentum=0.9, global_clipnorm=None if mode == "oracle_unclipped" else 0.05,
            weight_decay=0.02, gradient_accumulation_steps=2, use_ema=True,
            ema_momentum=0.8)
        opt.exclude_from_weight_decay(var_names=["bias"])
        model.compile(optimizer=opt, loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    result = {"weights": {k: v.detach().clone() for k, v in model.module.state_dict().items()},
              "loss": history.history["loss"], "iterations": model.optimizer.iterations}
    rank = strategy.extended.replica_group.replica_id if strategy.num_replicas_in_sync > 1 \
        else 0
    torch.save(result, f"{out}.rank{rank}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


if __name__ == "__main__":
    main()
