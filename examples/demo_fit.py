"""The main job: train the seeds' CNN on handwritten digits with Keras-style ``fit``.

Two CPU replicas (``MirroredStrategy(devices=["cpu:0", "cpu:1"])``): the script
re-launches itself as a second process, both train in sync, only the chief prints
the progress bar and writes the TensorBoard logs (``logs/train``,
``logs/validation``).  Uses the digits bundled with distrib, so it runs offline::

    python examples/demo_fit.py            # or: make demo
    tensorboard --logdir logs              # to look at the curves
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

import distrib
from distrib.datasets import digits

GLOBAL_BATCH = 64
EPOCHS = 6
SHIFTS = [(0, 0), (2, 0), (-2, 0), (0, 2), (0, -2)]  # pixels (rows, columns)


def build_cnn() -> nn.Module:
    """The seeds' CNN: Conv32-Pool-Conv64-Pool-Dense64-Dense10 on 28x28x1 images."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def augment(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each training image also shifted by 2 pixels up, down, left and right (5x the data).

    The digits sit in a 2-pixel empty margin, so nothing is cut off.
    """
    shifted = [np.roll(images, shift, axis=(2, 3)) for shift in SHIFTS]
    return np.concatenate(shifted), np.concatenate([labels] * len(SHIFTS))


def main() -> None:
    start = time.perf_counter()
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    chief = strategy.extended.should_save_summary
    if chief:
        print(f"Number of devices: {strategy.num_replicas_in_sync}")
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    x_train, y_train = augment(x_train, y_train)
    torch.manual_seed(0)
    with strategy.scope():  # the seeds' pattern: build, compile and train in the scope
        model = distrib.Model(build_cnn())
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        model.fit(x_train, y_train, batch_size=GLOBAL_BATCH, epochs=EPOCHS,
                  validation_data=(x_test, y_test),
                  callbacks=[distrib.callbacks.TensorBoard(log_dir="logs")])
        loss, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    if chief:
        print(f"Test loss: {loss:.4f} - Test accuracy: {accuracy:.4f} "
              f"({len(x_test)} images, {time.perf_counter() - start:.0f}s in all)")


if __name__ == "__main__":
    main()
