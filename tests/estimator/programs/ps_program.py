"""An Estimator trained with ``ps`` tasks (or alone), float64 SGD with momentum.

    python ps_program.py MODEL_DIR OUT [--max_steps N] [--timeout S] [--marker PATH]

Every task runs ``train_and_evaluate``; each training task writes to OUT (``OUT.<task>``)
how many steps it made, and the chief also the final global step and the variables of
the newest checkpoint (with ``PS_MODEL_LOSS_SCALE=1``: also its loss scale and
counter).  ``--marker``: the chief writes PATH after its 3rd step and then
trains slowly (a test kills a task then).  Without TF_CONFIG the program trains alone,
the oracle of a cluster where one task trains.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

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


class CountSteps(SessionRunHook):
    """Counts this task's steps; with a marker, writes it after step 3 and slows down."""

    def __init__(self, marker: str | None) -> None:
        self.steps = 0
        self.marker = marker

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1
        if self.marker is not None and self.steps >= 3:
            Path(self.marker).touch()
            time.sleep(0.05)


def saved_loss_scale(path: str) -> list[float]:
    """The dynamic loss scale and counter the checkpoint at ``path`` holds."""
    net = nn.Sequential(nn.Linear(5, 8, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(8, 3, dtype=torch.float64))
    opt = distrib.mixed_precision.LossScaleOptimizer(torch.optim.SGD(net.parameters(), lr=0.1))
    distrib.Checkpoint(loss_scale_optimizer=opt).restore(path).expect_partial()
    return [float(opt.loss_scale), float(opt.dynamic_counter)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--max_steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--marker", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(levelname)s:%(message)s")
    config = RunConfig(tf_random_seed=7, save_checkpoints_steps=10, log_step_count_steps=10,
                       experimental_max_worker_delay_secs=0,
                       communication_options=distrib.CommunicationOptions(
                           timeout_seconds=args.timeout))
    estimator = Estimator(model_fn, model_dir=args.model_dir, config=config)
    counter = CountSteps(args.marker if config.is_chief else None)
    train_and_evaluate(estimator, TrainSpec(input_fn, max_steps=args.max_steps,
                                            hooks=[counter]),
                       EvalSpec(input_fn, steps=None, start_delay_secs=0, throttle_secs=0))
    if config.task_type in ("ps", "evaluator"):
        return
    doc: dict[str, Any] = {"steps": counter.steps}
    if config.is_chief:
        latest = estimator.latest_checkpoint()
        doc["global_step"] = int(estimator.get_variable_value("global_step"))
        doc["checkpoint"] = latest
        doc["variables"] = {name: estimator.get_variable_value(name).tolist()
                            for name in estimator.get_variable_names()
                            if name.startswith("sequential")}
        if os.environ.get("PS_MODEL_LOSS_SCALE") == "1":
            doc["loss_scale"] = saved_loss_scale(latest)
    name = f"{config.task_type}:{config.task_id}" if config.cluster_spec else "alone"
    Path(f"{args.out}.{name}").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
