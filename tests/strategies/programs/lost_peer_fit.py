"""Keras fit on MirroredStrategy(["cpu:0", "cpu:1"]) where replica 1 stops at batch 3.

Usage: python lost_peer_fit.py kill|raise
"kill": replica 1 kills itself with SIGKILL (a lost peer); "raise": replica 1's callback
raises ValueError (the user's own error).  Replica 0 survives and reports the failure.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import torch

import distrib

mode = sys.argv[1]
strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
rid = strategy.extended.replica_group.replica_id
x = np.random.RandomState(0).rand(256, 4)
y = x.sum(1, keepdims=True)


class StopReplica1(distrib.callbacks.Callback):
    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if rid == 1 and batch == 3:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("replica 1 failed on purpose")


with strategy.scope():
    model = distrib.Model(torch.nn.Linear(4, 1))
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=8, epochs=3, callbacks=[StopReplica1()], verbose=0)  # FIT LINE
