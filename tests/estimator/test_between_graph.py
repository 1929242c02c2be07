"""The Estimator's ``ps`` path is a strategy: ``BetweenGraphStrategy`` and its seams.

The cluster test runs a real ``ps`` task (``programs/ps_program.py``) and this process as
the chief, so that the chief's objects and strategy can be looked at.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.cluster import ClusterSpec, SimpleClusterResolver
from distrib.errors import ConfigError
from distrib.estimator import (
    Estimator,
    EstimatorSpec,
    EvalSpec,
    ModeKeys,
    RunConfig,
    TrainSpec,
    train_and_evaluate,
)
from distrib.strategies.between_graph import BetweenGraphExtended, BetweenGraphStrategy
from tests import forked
from tests.support import REPO, clean_env, localhost_cluster, tf_config, wait_all

PROGRAM = str(REPO / "tests" / "estimator" / "programs" / "ps_program.py")
SECRET = {"DISTRIB_CLUSTER_SECRET": "test-secret-of-32-bytes-0123456"}
CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}

rng = np.random.RandomState(0)
X = torch.from_numpy(rng.randn(48, 4))
Y = torch.from_numpy(rng.randn(48, 1))


def _input_fn(mode: str) -> Any:
    ds = distrib.data.Dataset.from_tensor_slices((X, Y))
    return (ds.repeat() if mode == ModeKeys.TRAIN else ds).batch(8)


def _model_fn(made: list[Any]) -> Any:
    def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        net = nn.Sequential(nn.Linear(4, 6, dtype=torch.float64),
                            nn.BatchNorm1d(6, dtype=torch.float64), nn.Tanh(),
                            nn.Linear(6, 1, dtype=torch.float64))
        loss = nn.functional.mse_loss(net(features), labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        made.append((optimizer, distrib.get_strategy() if mode == ModeKeys.TRAIN else None))
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)
    return model_fn


def _config() -> RunConfig:
    return RunConfig(tf_random_seed=3, save_checkpoints_steps=5, log_step_count_steps=None,
                     save_summary_steps=None,
                     communication_options=distrib.CommunicationOptions(timeout_seconds=60))


def _variables(estimator: Estimator) -> dict[str, np.ndarray]:
    return {name: estimator.get_variable_value(name) for name in estimator.get_variable_names()}


def test_the_strategy_records_modules_and_optimizers_and_touches_no_optimizer() -> None:
    strategy = BetweenGraphStrategy(SimpleClusterResolver(ClusterSpec(CLUSTER), task_type="worker",
                                                          task_id=0))
    ext = strategy.extended
    with strategy.scope():
        net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    assert ext.setup_optimizer(opt) is opt
    assert all(ext.keeps_in_sync(p) for p in net.parameters())
    assert not ext.keeps_in_sync(nn.Parameter(torch.ones(1)))
    assert not ext.should_checkpoint and not ext.active
    assert ext.parameter_devices == ("/job:ps/replica:0/task:0/device:CPU:0",)
    # Before a run starts nothing is on the ps tasks: the step is the optimizer's own.
    assert not ext.manages_optimizer(opt)
    net(torch.ones(2, 3)).sum().backward()
    before = net.weight.detach().clone()
    opt.step()
    torch.testing.assert_close(net.weight.detach(), before - 0.5 * 2 * torch.ones(1, 3))
    assert not opt._optimizer_step_pre_hooks


def test_the_strategy_needs_a_ps_job_and_a_training_task() -> None:
    for cluster, task in (({"chief": ["h:1"], "worker": ["h:2"]}, "chief"), (CLUSTER, "ps"),
                          (CLUSTER, "evaluator")):
        with pytest.raises(ConfigError, match="'ps' job"):
            BetweenGraphStrategy(SimpleClusterResolver(ClusterSpec(cluster), task_type=task,
                                                       task_id=0))


def test_an_estimator_program_imports_grpc_only_with_ps_tasks() -> None:
    code = "import sys, distrib.estimator; print('grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120, env=clean_env())
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # a ps process; this process is the chief
def test_the_ps_path_trains_through_the_strategy_seams(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The oracle: the same model_fn trained alone, in float64.
    alone = Estimator(_model_fn([]), model_dir=str(tmp_path / "alone"), config=_config())
    alone.train(_input_fn, max_steps=10)

    cluster = localhost_cluster(chief=1, ps=1)
    ps = forked.popen([PROGRAM, str(tmp_path / "ps_model"), str(tmp_path / "ps_out")],
                      clean_env(TF_CONFIG=tf_config(cluster, "ps", 0), OMP_NUM_THREADS="1",
                                **SECRET))
    states: list[tuple[bool, type, dict[str, Any]]] = []
    seam = BetweenGraphExtended.module_state_dict

    def recorded(self: BetweenGraphExtended, module: nn.Module) -> dict[str, Any]:
        state = seam(self, module)
        states.append((self.active, type(self), state))
        return state

    monkeypatch.setattr(BetweenGraphExtended, "module_state_dict", recorded)
    monkeypatch.setenv("TF_CONFIG", tf_config(cluster, "chief", 0))
    for name, value in SECRET.items():
        monkeypatch.setenv(name, value)
    made: list[Any] = []
    chief = Estimator(_model_fn(made), model_dir=str(tmp_path / "model"), config=_config())
    try:
        train_and_evaluate(chief, TrainSpec(_input_fn, max_steps=10),
                           EvalSpec(_input_fn, steps=1, start_delay_secs=0, throttle_secs=0))
    finally:
        code, _, stderr = wait_all([("ps:0", ps)], timeout=120)["ps:0"]
    assert code == 0, stderr[-3000:]

    optimizer = made[0][0]
    assert all(o is optimizer for o, _ in made)
    assert all(type(s) is BetweenGraphStrategy for _, s in made if s is not None)
    assert not optimizer._optimizer_step_pre_hooks  # the strategy's seam pushed the gradients
    # The checkpoints written while training took the state through the strategy's seam.
    assert any(active for active, _, _ in states)
    assert {kind for _, kind, _ in states} == {BetweenGraphExtended}
    assert chief.latest_checkpoint().endswith("model.ckpt-10")
    ours, theirs = _variables(chief), _variables(alone)
    assert sorted(ours) == sorted(theirs)
    assert any("momentum_buffer" in name for name in ours)  # the ps optimizer's slots
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, rtol=0, atol=1e-9, err_msg=name)
