"""Decisions the replicas of a MirroredStrategy(["cpu:0", "cpu:1"]) Estimator must agree on.

    python agreement_program.py ROOT_DIR

runs three trainings, each in its own model directory under ROOT_DIR:

stop:  a hook asks to stop on replica 1 only (after step 2): both replicas stop there.
secs:  checkpoints every 0.1 s of the chief's clock: every replica saves at the same steps.
error: a hook raises on replica 1 only: both replicas fail, neither hangs.
Each replica prints ``KIND: replica R: global_step=N`` (or ``...: failed: ...``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
from torch import nn

import distrib
from distrib.estimator import Estimator, EstimatorSpec, RunConfig, SessionRunArgs, SessionRunHook

X = torch.arange(64, dtype=torch.float32).reshape(32, 2) / 64
Y = X.sum(1, keepdim=True)


def input_fn(input_context: Any = None) -> Any:
    return distrib.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(4)


def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = nn.Linear(2, 1)
    loss = nn.functional.mse_loss(net(features), labels)
    time.sleep(0.02)
    return EstimatorSpec(mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), lr=0.1))


class LocalStop(SessionRunHook):
    def __init__(self, replica: int, fail: bool) -> None:
        self.replica, self.fail = replica, fail

    def before_run(self, run_context: Any) -> SessionRunArgs:
        return SessionRunArgs("global_step")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.replica == 1 and int(run_values.results) == 2:
            if self.fail:
                raise RuntimeError("this replica's hook failed")
            run_context.request_stop()


def train(strategy: Any, kind: str, model_dir: str) -> None:
    replica = strategy.extended.replica_group.replica_id
    saving = {"save_checkpoints_secs": 0.1} if kind == "secs" else {}
    estimator = Estimator(model_fn, model_dir=model_dir,
                          config=RunConfig(train_distribute=strategy, **saving))
    hooks = [] if kind == "secs" else [LocalStop(replica, fail=kind == "error")]
    try:
        estimator.train(input_fn, steps=12, hooks=hooks)
    except Exception as exc:  # reported, not raised: the test reads both replicas' lines
        print(f"{kind}: replica {replica}: failed: {type(exc).__name__}: {exc}", flush=True)
        return
    step = int(estimator.get_variable_value("global_step"))
    print(f"{kind}: replica {replica}: global_step={step}", flush=True)


def main() -> None:
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    for kind in ("stop", "secs", "error"):
        train(strategy, kind, f"{sys.argv[1]}/{kind}")


if __name__ == "__main__":
    main()
