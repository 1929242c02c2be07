"""The seeds' exercise, Keras style: a multi-worker ``fit`` that survives losing a worker.

TensorFlow original, in short::

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(dataset, epochs=3, callbacks=[
        tf.keras.callbacks.BackupAndRestore(backup_dir, save_freq=5)])

Run it under a launcher that restarts the workers when one dies::

    distrib run --cluster "worker=2" --max-restarts 2 examples/fault_tolerant_fit.py \\
        --backup-dir runs/backup --out runs/final.npz

Kill any worker at any moment (``kill -9``, an exception, a preemption's SIGTERM):
the launcher stops the others and starts every worker again, and ``BackupAndRestore``
resumes the fit at the step of the newest backup — same data position, optimizer
state, metric sums, callback states and random generators — so the final weights and
history are bitwise those of a run that was never interrupted (float64, CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib
from distrib.datasets import digits


class Trace(distrib.callbacks.Callback):
    """Prints the process id and every step (what the fault-injection test watches)."""

    def __init__(self, step_seconds: float) -> None:
        super().__init__()
        self.step_seconds = step_seconds

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        return 0  # reads no logs: fit keeps its usual synchronisation points

    def on_train_begin(self, logs: Any = None) -> None:
        print(f"pid {os.getpid()}", flush=True)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        time.sleep(self.step_seconds)
        print(f"step {self.model._train_counter}", flush=True)


def build_model() -> distrib.Model:
    net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(), nn.Dropout(0.2),
                        nn.Linear(64, 10)).double()
    model = distrib.Model(net)
    model.compile(optimizer=torch.optim.Adam(net.parameters(), lr=1e-3),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--backup-dir", default="runs/backup")
    ap.add_argument("--save-freq", default="5", help="'epoch' or a number of steps")
    ap.add_argument("--out", default=None, help="write the final weights and history here")
    ap.add_argument("--trace", action="store_true", help="print the pid and every step")
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pause after every step (to stand in for a bigger model)")
    args = ap.parse_args()

    strategy = distrib.MultiWorkerMirroredStrategy()
    torch.manual_seed(0)
    (x_train, y_train), _ = digits.load_data(data_format="channels_first")
    global_batch = 32 * strategy.num_replicas_in_sync
    dataset = (distrib.data.Dataset.from_tensor_slices((x_train.astype(np.float64), y_train))
               .shuffle(len(x_train), seed=0).batch(global_batch))
    with strategy.scope():
        model = build_model()
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
    callbacks: list[Any] = [
        distrib.callbacks.BackupAndRestore(args.backup_dir, save_freq=save_freq,
                                           save_before_preemption=True),
        distrib.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)]
    if args.trace:
        callbacks.append(Trace(args.step_seconds))
    history = model.fit(dataset, epochs=args.epochs, verbose=0, callbacks=callbacks)
    if strategy.extended.should_checkpoint:
        print(f"workers={strategy.num_replicas_in_sync} "
              f"final loss={history.history['loss'][-1]:.6f}", flush=True)
        if args.out:
            np.savez(args.out, *model.get_weights())
            with open(args.out + ".history.json", "w") as f:
                json.dump(history.history, f)


if __name__ == "__main__":
    main()
