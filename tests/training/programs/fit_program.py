"""One Keras-style program, run unchanged under every strategy (the oracle contract for fit).

Usage: python fit_program.py MODE OUT
MODE: oracle | one_device | mirrored | multi_worker | fp16_inf
Trains a small float64 CNN with ``fit`` (global batch 16, 70 examples -> a final partial
batch of 6; 30 validation examples -> 16 + 14; shuffled; SGD with momentum; accuracy metric), then
evaluates and predicts, and saves weights, history, evaluation and predictions (chief).
Epoch checkpoints are written with ``ModelCheckpoint`` (weights only).
``fp16_inf`` trains one mixed_float16 step on 2 replicas in which replica 1's rows
overflow, and writes each replica's loss scale and whether its weights changed.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

import distrib
from distrib.training import Model, callbacks, losses

GLOBAL_BATCH = 16


def make_strategy(mode: str) -> distrib.Strategy:
    if mode == "one_device":
        return distrib.OneDeviceStrategy("cpu:0")
    if mode in ("mirrored", "fp16_inf"):
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    if mode == "multi_worker":
        return distrib.MultiWorkerMirroredStrategy()
    return distrib.get_strategy()


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 10, n)
    x = rng.randn(n, 1, 12, 12) * 0.5
    x[np.arange(n), 0, y, y] += 2.0  # a learnable signal
    return x, y.astype("int64")


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 5 * 5, 10))


def oracle_run(strategy: distrib.Strategy, out: str) -> None:
    torch.manual_seed(0)  # replicas other than the chief start elsewhere: broadcast fixes it
    if strategy.num_replicas_in_sync > 1 and not strategy.extended.should_checkpoint:
        torch.manual_seed(123)
    with strategy.scope():
        model = Model(cnn().double())
        # SGD, not Adam: Adam's update hides a wrongly scaled gradient.
        sgd = torch.optim.SGD(model.module.parameters(), lr=0.05, momentum=0.9)
        model.compile(optimizer=sgd, loss=losses.SparseCategoricalCrossentropy(True),
                      metrics=["accuracy"])
    x, y = data(70, 1)
    vx, vy = data(30, 2)
    torch.manual_seed(7)  # the shuffle seed comes from the chief's generator
    # Every replica saves; the chief writes, atomically, then all wait for it.
    checkpoint = callbacks.ModelCheckpoint(out + ".ckpt-{epoch}.pt", save_weights_only=True)
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=3, validation_data=(vx, vy),
                        verbose=0, callbacks=[checkpoint])
    evaluation = model.evaluate(vx, vy, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
    predictions = model.predict(vx, batch_size=GLOBAL_BATCH, verbose=0)
    result = {"weights": {k: v.detach().clone() for k, v in model.module.state_dict().items()},
              "history": history.history, "evaluate": evaluation,
              "predict": torch.from_numpy(predictions)}
    torch.save(result, out + f".rank{strategy.extended.replica_group.replica_id}")
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)


def fp16_run(strategy: distrib.Strategy, out: str) -> None:
    distrib.mixed_precision.set_global_policy("mixed_float16")
    torch.manual_seed(0)
    with strategy.scope():
        model = Model(nn.Sequential(nn.Flatten(), nn.Linear(144, 10)))
        model.compile(optimizer="sgd", loss=losses.SparseCategoricalCrossentropy(True))
    x, y = data(8, 3)
    x = x.astype("float32")
    x[6, 0, 0, 0] = 1e30  # replica 1's rows (4..7) overflow in float16
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    unchanged = all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    rid = strategy.extended.replica_group.replica_id
    with open(f"{out}.rank{rid}", "w") as f:
        f.write(f"scale={float(model.optimizer.loss_scale)} unchanged={unchanged}")


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    strategy = make_strategy(mode)
    if mode == "fp16_inf":
        fp16_run(strategy, out)
    else:
        oracle_run(strategy, out)


if __name__ == "__main__":
    main()
