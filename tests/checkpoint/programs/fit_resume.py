"""A TF_CONFIG worker that fits with BackupAndRestore, for the resume-on-other-workers test.

Usage: python fit_resume.py BACKUP_DIR OUT STOP_AT
Fits a float64 MLP (SGD with momentum, no dropout) on a dataset of 96 rows batched by a
global batch of 12 (DATA-sharded across the workers), 2 epochs, with
``BackupAndRestore(BACKUP_DIR, save_freq=2)``.  With STOP_AT > 0 every worker leaves
abruptly (``os._exit(3)``) after that global step, as a crash would.  At the end the
chief writes the weights to OUT (.npz), and the history and the number of steps this run
took to OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib

backup, out, stop_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
strategy = distrib.MultiWorkerMirroredStrategy(
    communication_options=distrib.CommunicationOptions(timeout_seconds=60))
g = torch.Generator().manual_seed(3)
x = torch.randn(96, 5, generator=g, dtype=torch.float64)
y = x.sum(1, keepdim=True) * 0.5
data = distrib.data.Dataset.from_tensor_slices((x, y)).batch(12)


class Crash(distrib.callbacks.Callback):
    steps = 0

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        return 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.steps += 1
        if stop_at and self.steps >= stop_at:
            os._exit(3)


with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1)).double())
    model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                  loss="mse")
crash = Crash()
history = model.fit(data, epochs=2, verbose=0, callbacks=[
    distrib.callbacks.BackupAndRestore(backup, save_freq=2), crash]).history
if strategy.extended.should_checkpoint:
    np.savez(out, *[v.detach().numpy() for v in model.state_dict().values()])
    with open(out + ".json", "w") as f:
        json.dump({"history": history, "steps_run": crash.steps}, f)
