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

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import distrib  # noqa: E402
from distrib.estimator import (  # noqa: E402
    Estimator,
    EvalSpec,
    RunConfig,
    SessionRunHook,
    TrainSpec,
    train_and_evaluate,
)
from tests.estimator.programs.ps_model import input_fn, model_fn  # noqa: E402

OUT, VICTIM = Path(sys.argv[1]), sys.argv[2]
MODEL_DIR = OUT / "model"


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
