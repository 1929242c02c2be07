"""``train_and_evaluate`` with ``ps`` tasks, started by ``distrib run``; one task is killed mid-training.

    distrib run --cluster chief=1,worker=1,ps=1,evaluator=1 [--max-restarts N] \\
        estimator_ps.py OUT VICTIM

Every task writes ``OUT/<task>.<start>.pid`` (start: ``DISTRIB_RESTART_COUNT``).  After
its first step the chief SIGKILLs VICTIM's first process (``evaluator:0`` or
``worker:0``) and waits until it is gone, then trains on to 60 global steps; it writes
``OUT/report.json`` with the final global step and the steps it evaluated.  Every wait is
bounded (300 s), then an error.
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
from distrib.estimator import (
    Estimator,
    EstimatorSpec,
    EvalSpec,
    ModeKeys,
    RunConfig,
    SessionRunHook,
    TrainSpec,
    metrics,
    train_and_evaluate,
)

OUT, VICTIM = Path(sys.argv[1]), sys.argv[2]
MODEL_DIR = OUT / "model"
rng = np.random.RandomState(0)
X = rng.randn(64, 5)
Y = rng.randint(0, 3, 64)


def input_fn(mode: str) -> Any:
    ds = distrib.data.Dataset.from_tensor_slices((torch.from_numpy(X), torch.from_numpy(Y)))
    return (ds.repeat() if mode == ModeKeys.TRAIN else ds).batch(8)


def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = nn.Sequential(nn.Linear(5, 8, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(8, 3, dtype=torch.float64))
    logits = net(features)
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"logits": logits})
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={
        "accuracy": metrics.accuracy(labels, logits.argmax(1))})


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


class KillVictim(SessionRunHook):
    """On the chief: SIGKILL the victim after the first step, once."""

    def __init__(self) -> None:
        self.steps = 0

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1
        if self.steps != 1:
            return
        deadline = time.monotonic() + 300
        while not (OUT / f"{VICTIM}.0.pid").exists():   # it may still be starting
            if time.monotonic() > deadline:
                raise RuntimeError(f"{VICTIM} did not start within 300 s")
            time.sleep(0.05)
        pid = int((OUT / f"{VICTIM}.0.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        while not gone(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{VICTIM} did not die within 300 s")
            time.sleep(0.05)


def main() -> None:
    config = RunConfig(tf_random_seed=7, save_checkpoints_steps=10, log_step_count_steps=20,
                       experimental_max_worker_delay_secs=0,
                       communication_options=distrib.CommunicationOptions(timeout_seconds=20))
    task = f"{config.task_type}:{config.task_id}"
    start = os.environ["DISTRIB_RESTART_COUNT"]
    (OUT / f"{task}.{start}.pid.tmp").write_text(str(os.getpid()))
    os.replace(OUT / f"{task}.{start}.pid.tmp", OUT / f"{task}.{start}.pid")
    estimator = Estimator(model_fn, model_dir=str(MODEL_DIR), config=config)
    hooks = [KillVictim()] if config.is_chief else []
    train_and_evaluate(estimator, TrainSpec(input_fn, max_steps=60, hooks=hooks),
                       EvalSpec(input_fn, steps=None, start_delay_secs=0, throttle_secs=0))
    if config.is_chief:
        (OUT / "report.json").write_text(json.dumps({
            "global_step": int(estimator.get_variable_value("global_step"))}))


if __name__ == "__main__":
    main()
