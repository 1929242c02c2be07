"""The seeds' callbacks program: TensorBoard, checkpoints, early stopping, LR schedule, CSV log.

TensorFlow original, in short::

    callbacks = [tf.keras.callbacks.TensorBoard(log_dir="./logs"),
                 tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix,
                                                    save_weights_only=True),
                 tf.keras.callbacks.LearningRateScheduler(decay),
                 PrintLR()]
    model.fit(train_dataset, epochs=12, callbacks=callbacks)

Run: ``python examples/callbacks_tensorboard.py [--out DIR] [--epochs 4]``; then
``tensorboard --logdir DIR/logs``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib
from distrib.datasets import digits


def decay(epoch: int, lr: float) -> float:
    return 1e-3 if epoch < 2 else 1e-4


class PrintLR(distrib.callbacks.Callback):
    """A user callback, as in the TF tutorial: print the learning rate after each epoch."""

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.model.distribute_strategy.extended.should_save_summary:
            lr = self.model.optimizer.param_groups[0]["lr"]
            print(f"\nLearning rate for epoch {epoch + 1} is {lr}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="training_output")
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    (x_train, y_train), (x_test, y_test) = digits.load_data(data_format="channels_first")
    torch.manual_seed(0)
    with strategy.scope():  # the seeds' pattern: build, compile and train in the scope
        model = distrib.Model(nn.Sequential(
            nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10)))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(
            from_logits=True), metrics=["accuracy"])
        callbacks = [
            distrib.callbacks.TensorBoard(log_dir=str(out / "logs")),
            distrib.callbacks.ModelCheckpoint(filepath=str(out / "ckpt_{epoch}.pt"),
                                              save_weights_only=True),
            distrib.callbacks.LearningRateScheduler(decay),
            distrib.callbacks.EarlyStopping(monitor="val_loss", patience=3,
                                            restore_best_weights=True),
            distrib.callbacks.CSVLogger(str(out / "history.csv")),
            PrintLR(),
        ]
        model.fit(x_train, y_train, batch_size=64, epochs=args.epochs,
                  validation_data=(x_test, y_test), callbacks=callbacks, verbose=2)


if __name__ == "__main__":
    main()
