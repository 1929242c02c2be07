"""Model.fit under ParameterServerStrategy, started by ``distrib run``; worker:1 is killed mid-fit.

    distrib run --cluster chief=1,worker=2,ps=1 [--max-restarts N] ps_fit.py OUT MODE

Every task writes ``OUT/<task>.<start>.pid`` (start: ``DISTRIB_RESTART_COUNT``) before it
creates the strategy.  The chief fits 5 epochs of 8 steps; after epoch 1 it SIGKILLs
worker:1's first process and waits until it is gone.  With MODE ``rejoin`` it then
schedules small functions until one runs on a restarted worker:1 (a new process), before
the rest of fit runs.  With MODE ``kill-ps`` it SIGKILLs ps:0 instead (in the first run
only); fit resumes from its ``BackupAndRestore`` backup when the cluster is restarted.  The chief writes ``OUT/report.json``: the epochs' losses, and the
pids of worker:1 before and after.  Every wait is bounded (300 s), then an error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator, experimental_get_current_worker_index

OUT, MODE = Path(sys.argv[1]), sys.argv[2]
CONFIG = json.loads(os.environ["TF_CONFIG"])
TASK = f"{CONFIG['task']['type']}:{CONFIG['task']['index']}"


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + 300
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited 300 s for {what}")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def where() -> tuple[int, int]:
    return experimental_get_current_worker_index(), os.getpid()


class KillWorker1(distrib.callbacks.Callback):
    def __init__(self, strategy: Any) -> None:
        super().__init__()
        self.strategy = strategy
        self.report: dict[str, Any] = {}

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch != 1:
            return
        if MODE == "kill-ps":
            if os.environ["DISTRIB_RESTART_COUNT"] == "0":
                os.kill(int((OUT / "ps:0.0.pid").read_text()), signal.SIGKILL)
            return
        pid = int((OUT / "worker:1.0.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: gone(pid), "worker:1 to die")
        self.report["killed"] = pid
        if MODE != "rejoin":
            return
        coordinator = ClusterCoordinator(self.strategy)   # fit's own coordinator
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ran = [coordinator.schedule(where) for _ in range(2)]
            coordinator.join()
            on_1 = [pid for index, pid in (r.fetch() for r in ran) if index == 1]
            if on_1:
                self.report["rejoined"] = on_1[0]
                return
            time.sleep(0.05)
        raise RuntimeError("worker:1 did not rejoin within 300 s")


def main() -> None:
    start = os.environ["DISTRIB_RESTART_COUNT"]
    (OUT / f"{TASK}.{start}.pid.tmp").write_text(str(os.getpid()))
    os.replace(OUT / f"{TASK}.{start}.pid.tmp", OUT / f"{TASK}.{start}.pid")
    strategy = distrib.ParameterServerStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=20))
    rng = np.random.RandomState(0)
    x = rng.rand(256, 8).astype("float32")
    y = (x.sum(1) > 4).astype("int64")
    train = distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=1).batch(32)
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    killer = KillWorker1(strategy)
    # synchronous backups: the one of epoch 0 is complete before ps:0 is killed
    backup = distrib.callbacks.BackupAndRestore(
        str(OUT / "backup"), options=distrib.train.CheckpointOptions(enable_async=False))
    history = model.fit(train.repeat(), epochs=5, steps_per_epoch=8, verbose=2,
                        callbacks=[backup, killer])
    (OUT / "report.json").write_text(json.dumps({"loss": history.history["loss"],
                                                 "epochs": history.epoch, **killer.report}))


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
