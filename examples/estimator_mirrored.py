"""The seeds' first Estimator example ("How can I perform distributed training with TensorFlow
Estimators?"): ``MirroredStrategy`` as the Estimator's ``train_distribute``.

TensorFlow original, in short::

    def model_fn(features, labels, mode):
        model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation='relu'),
                                     tf.keras.layers.Dense(1)])
        predictions = model(features)
        loss = tf.keras.losses.MeanSquaredError()(labels, predictions)
        optimizer = tf.compat.v1.train.AdamOptimizer()
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions, loss=loss,
                                          train_op=train_op)

    strategy = tf.distribute.MirroredStrategy()
    config = tf.estimator.RunConfig(train_distribute=strategy)
    estimator = tf.estimator.Estimator(model_fn=model_fn, config=config)

    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices(
            (np.random.rand(1000, 10), np.random.rand(1000, 1)))
        return dataset.batch(32)

    estimator.train(input_fn=input_fn, steps=1000)

The edits: Keras layers -> torch modules, the TF optimizer -> ``torch.optim.Adam`` passed as
``train_op``, ``tf.*`` -> ``distrib.*``; the random data is drawn once, from a seeded
generator, so that every replica process reads the same data.  As in TensorFlow, training
ends when the input does (one epoch: 16 steps on two replicas).  ``--replicas 2`` trains on
two CPU replicas (``MirroredStrategy(devices=["cpu:0", "cpu:1"])``); the default is
``MirroredStrategy()`` (every local GPU, else one CPU).

    python examples/estimator_mirrored.py --replicas 2
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch
from torch import nn

import distrib

rng = np.random.RandomState(0)
FEATURES = rng.rand(1000, 10).astype("float32")
TARGETS = rng.rand(1000, 1).astype("float32")


def model_fn(features, labels, mode):  # type: ignore[no-untyped-def]
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))
    predictions = model(features)
    if mode == distrib.estimator.ModeKeys.PREDICT:
        return distrib.estimator.EstimatorSpec(mode=mode, predictions=predictions)
    loss = distrib.losses.MeanSquaredError()(labels, predictions)
    optimizer = torch.optim.Adam(model.parameters())
    return distrib.estimator.EstimatorSpec(mode=mode, predictions=predictions, loss=loss,
                                           train_op=optimizer)


def input_fn():  # type: ignore[no-untyped-def]
    dataset = distrib.data.Dataset.from_tensor_slices((FEATURES, TARGETS))
    return dataset.batch(32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=0, help="CPU replicas (0: default devices)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--model_dir", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
    torch.manual_seed(0)

    strategy = (distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(args.replicas)])
                if args.replicas else distrib.MirroredStrategy())
    config = distrib.estimator.RunConfig(train_distribute=strategy)
    estimator = distrib.estimator.Estimator(model_fn=model_fn, model_dir=args.model_dir,
                                            config=config)
    estimator.train(input_fn=input_fn, steps=args.steps)
    metrics = estimator.evaluate(input_fn=input_fn, steps=10)
    if strategy.extended.should_save_summary:
        print(f"replicas={strategy.num_replicas_in_sync} global_step={metrics['global_step']} "
              f"eval loss={metrics['loss']:.4f}")


if __name__ == "__main__":
    main()
