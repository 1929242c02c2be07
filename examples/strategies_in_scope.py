"""The seeds' Keras program under each strategy, written as the seeds write it.

TensorFlow original, in short::

    np.random.seed(42)
    x = np.random.rand(1000, 20); y = (x[:, :10].sum(axis=1) > 5).astype(int)
    strategy = tf.distribute.MirroredStrategy()   # or OneDeviceStrategy, or
    # tf.distribute.experimental.MultiWorkerMirroredStrategy(
    #     communication=tf.distribute.experimental.CollectiveCommunication.NCCL)
    with strategy.scope():
        model = tf.keras.Sequential([...])
        model.compile(optimizer="adam",
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        model.fit(x, y, epochs=5, batch_size=64)
        model.evaluate(x, y); model.predict(x[:5])

Run: ``python examples/strategies_in_scope.py --strategy one_device|mirrored``, or
``distrib run --cluster worker=2 examples/strategies_in_scope.py --strategy multi_worker``.
Every process makes the data itself, so it is seeded: unseeded random data differs
between the replica processes, and ``fit`` would refuse it with an error that says so.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch
from torch import nn

import distrib


def make_strategy(name: str) -> distrib.Strategy:
    if name == "one_device":
        return distrib.OneDeviceStrategy("cpu:0")
    if name == "mirrored":
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    with warnings.catch_warnings():  # the seed's deprecated spelling, kept on purpose
        warnings.simplefilter("ignore", FutureWarning)
        return distrib.experimental.MultiWorkerMirroredStrategy(
            communication=distrib.experimental.CollectiveCommunication.NCCL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", choices=["one_device", "mirrored", "multi_worker"],
                    default="mirrored")
    ap.add_argument("--epochs", type=int, default=10)
    args = ap.parse_args()
    strategy = make_strategy(args.strategy)
    np.random.seed(42)
    x = np.random.rand(1000, 20)
    y = (x[:, :10].sum(axis=1) > 5).astype("int64")
    torch.manual_seed(0)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2)))
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        model.fit(x, y, epochs=args.epochs, batch_size=64, verbose=0)
        loss, accuracy = model.evaluate(x, y, verbose=0)
        predictions = model.predict(x[:5], verbose=0)
    if strategy.extended.should_save_summary:
        print(f"strategy={type(strategy).__name__} replicas={strategy.num_replicas_in_sync} "
              f"loss={loss:.4f} accuracy={accuracy:.4f} predictions={predictions.shape}")


if __name__ == "__main__":
    main()
