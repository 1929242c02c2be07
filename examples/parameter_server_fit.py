"""The seeds' parameter-server program: ``ParameterServerStrategy`` + Keras-style ``fit``.

TensorFlow original, in short::

    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"chief": [...], "worker": [...],
                                                      "ps": [...]},
                                          "task": {"type": "chief", "index": 0}})
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    with strategy.scope():
        model = create_model()
        model.compile(optimizer="adam", loss=..., metrics=["accuracy"])
    model.fit(train_dataset, epochs=5, steps_per_epoch=...)
    model.evaluate(test_dataset)

The same program runs on every task: on the ``worker`` and ``ps`` tasks, creating the
strategy serves the chief until training ends.  Start every task on this machine with::

    distrib run --cluster chief=1,worker=2,ps=1 examples/parameter_server_fit.py

or by hand, each task with its own ``TF_CONFIG`` and the same ``DISTRIB_CLUSTER_SECRET``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

import distrib
from distrib.datasets import digits

BATCH = 64
SHIFTS = [(0, 0), (2, 0), (-2, 0), (0, 2), (0, -2)]  # pixels (rows, columns)


def create_model() -> distrib.Model:
    """The seeds' MLP: Flatten, Dense 128 (relu), Dense 10."""
    return distrib.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(),
                                       nn.Linear(128, 10)))


def augment(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each training image also shifted by 2 pixels up, down, left and right (5x the data)."""
    shifted = [np.roll(images, shift, axis=(2, 3)) for shift in SHIFTS]
    return np.concatenate(shifted), np.concatenate([labels] * len(SHIFTS))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    start = time.perf_counter()
    strategy = distrib.ParameterServerStrategy()   # the workers and the ps serve from here
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    x_train, y_train = augment(x_train, y_train)
    # Every worker reads the whole dataset, shuffled its own way, forever: the epochs are
    # counted in steps (TensorFlow's rule for parameter-server training).
    train_dataset = (distrib.data.Dataset.from_tensor_slices((x_train, y_train))
                     .shuffle(len(x_train)).batch(BATCH).repeat())
    test_dataset = distrib.data.Dataset.from_tensor_slices((x_test, y_test)).batch(256)
    torch.manual_seed(0)
    with strategy.scope():
        model = create_model()
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], pss_evaluation_shards="auto")
    model.fit(train_dataset, epochs=args.epochs, steps_per_epoch=len(x_train) // BATCH)
    loss, accuracy = model.evaluate(test_dataset, verbose=0)   # every test image once
    print(f"Test loss: {loss:.4f} - Test accuracy: {accuracy:.4f} "
          f"({len(x_test)} images, {strategy.extended.num_workers} workers, "
          f"{time.perf_counter() - start:.0f}s in all)")


if __name__ == "__main__":
    main()
