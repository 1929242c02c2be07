"""Bad input to the Estimator API: each a clear error naming the value, the rule and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.errors import InvalidTypeError, UsageError
from distrib.estimator import (
    Estimator,
    EstimatorSpec,
    EvalSpec,
    ModeKeys,
    RunConfig,
    TrainSpec,
    train_and_evaluate,
)
from tests.estimator.common import X, Y, input_fn, model_fn


def _net() -> nn.Module:
    return nn.Linear(4, 1)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"mode": "fit"}, UsageError, "mode=fit is not one of"),
    ({"mode": ModeKeys.TRAIN, "train_op": "sgd"}, UsageError, "Missing loss"),
    ({"mode": ModeKeys.TRAIN, "loss": torch.tensor(1.0)}, UsageError, "Missing train_op"),
    ({"mode": ModeKeys.TRAIN, "loss": torch.tensor(1.0, requires_grad=True),
      "train_op": "sgd"}, InvalidTypeError, "instead of optimizer.minimize"),
    ({"mode": ModeKeys.EVAL}, UsageError, "Missing loss"),
    ({"mode": ModeKeys.PREDICT}, UsageError, "Missing predictions"),
    ({"mode": ModeKeys.EVAL, "loss": torch.ones(3)}, UsageError, r"Loss must be scalar, given: "
                                                                 r"\(3,\)"),
    ({"mode": ModeKeys.PREDICT, "predictions": [1, 2]}, InvalidTypeError,
     "predictions must be Tensor or dict of Tensor"),
    ({"mode": ModeKeys.EVAL, "loss": torch.tensor(1.0),
      "eval_metric_ops": {"loss": (1, 2)}}, UsageError, 'Metric with name "loss" is not '
                                                        "allowed"),
    ({"mode": ModeKeys.EVAL, "loss": torch.tensor(1.0), "eval_metric_ops": {"acc": 0.5}},
     InvalidTypeError, "must be \\(metric_value, update_op\\) tuples"),
    ({"mode": ModeKeys.EVAL, "loss": torch.tensor(1.0), "evaluation_hooks": [object()]},
     InvalidTypeError, "All hooks must be SessionRunHook instances"),
])
def test_estimator_spec_rules(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        EstimatorSpec(**kwargs)


def test_spec_mode_cannot_change() -> None:
    spec = EstimatorSpec(ModeKeys.EVAL, loss=torch.tensor(1.0))
    with pytest.raises(UsageError, match="cannot be changed"):
        spec._replace(mode=ModeKeys.TRAIN)


def test_model_fn_signatures() -> None:
    with pytest.raises(UsageError, match="model_fn must be provided"):
        Estimator(None)
    with pytest.raises(UsageError, match="must include features argument"):
        Estimator(lambda inputs, labels: None)
    with pytest.raises(UsageError, match="has following not expected args: \\['batch'\\]"):
        Estimator(lambda features, labels, batch: None)
    with pytest.raises(UsageError, match="does not include params argument, but params"):
        Estimator(lambda features, labels: None, params={"lr": 0.1})
    with pytest.raises(UsageError, match="config must be an instance of `RunConfig`"):
        Estimator(model_fn, config={"model_dir": "x"})  # type: ignore[arg-type]


def test_model_fn_must_return_a_spec_and_take_labels(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="model_fn should return an EstimatorSpec"):
        Estimator(lambda features, labels, mode: {"loss": 1}).train(input_fn(), steps=1)
    with pytest.raises(UsageError, match="model_fn does not take labels, but input_fn returns"):
        Estimator(lambda features, mode: None).train(input_fn(), steps=1)


def test_a_loss_that_trains_nothing(tmp_path: Path) -> None:
    def fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        net = _net()
        loss = nn.functional.mse_loss(net(features["x"]), labels).detach()
        return EstimatorSpec(mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), 0.1))

    with pytest.raises(UsageError, match="does not depend on any trainable parameter"):
        Estimator(fn).train(input_fn(), steps=1)


@pytest.mark.parametrize("result, message", [
    ([1, 2, 3], "input_fn must return a distrib.data.Dataset"),
    (np.zeros((4, 2)), "input_fn must return a distrib.data.Dataset"),
    (None, "input_fn must return a distrib.data.Dataset"),
])
def test_input_fn_returning_the_wrong_structure(result: Any, message: str) -> None:
    with pytest.raises(InvalidTypeError, match=message):
        Estimator(model_fn).train(lambda: result, steps=1)


def test_dataset_elements_must_be_features_and_labels() -> None:
    three = lambda: distrib.data.Dataset.from_tensor_slices((X, Y, Y)).batch(4)  # noqa: E731
    with pytest.raises(UsageError, match="input_fn should return \\(features, labels\\) as a "
                                         "len 2 tuple"):
        Estimator(model_fn).train(three, steps=1)


def test_input_fn_arguments() -> None:
    with pytest.raises(InvalidTypeError, match="`input_fn` must be callable"):
        Estimator(model_fn).train("data.csv", steps=1)
    with pytest.raises(UsageError, match="input_fn takes \\['batch_size'\\]"):
        Estimator(model_fn).train(lambda batch_size: None, steps=1)


def test_train_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path))
    with pytest.raises(UsageError, match="Can not provide both steps and max_steps"):
        est.train(input_fn(), steps=1, max_steps=2)
    with pytest.raises(UsageError, match="Must specify steps > 0, given: 0"):
        est.train(input_fn(), steps=0)
    with pytest.raises(UsageError, match="Must specify max_steps > 0, given: -1"):
        est.train(input_fn(), max_steps=-1)
    with pytest.raises(InvalidTypeError, match="All hooks must be SessionRunHook"):
        est.train(input_fn(), steps=1, hooks=[print])
    with pytest.raises(UsageError, match="Could not find trained model"):
        est.get_variable_names()
    with pytest.raises(UsageError, match="Could not find trained model at this path"):
        est.evaluate(input_fn(), checkpoint_path=str(tmp_path / "model.ckpt-9"))


def test_train_on_an_evaluator_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"chief": ["h:1"]}, "task": {"type": '
                                    '"evaluator", "index": 0}}')
    with pytest.raises(UsageError, match="use distrib.estimator.train_and_evaluate"):
        Estimator(model_fn).train(input_fn(), steps=1)


def test_variable_names_and_predict_keys(tmp_path: Path) -> None:
    est = Estimator(model_fn, model_dir=str(tmp_path))
    est.train(input_fn(repeat=True), steps=1)
    with pytest.raises(UsageError, match="is not a variable of"):
        est.get_variable_value("dense/kernel")
    with pytest.raises(UsageError, match="Expected to run at least one output"):
        next(iter(est.predict(input_fn(), predict_keys=["probabilities"])))


def test_train_and_evaluate_specs() -> None:
    est = Estimator(model_fn)
    with pytest.raises(InvalidTypeError, match="`train_spec` must have type `TrainSpec`"):
        train_and_evaluate(est, {"input_fn": input_fn()}, EvalSpec(input_fn()))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="Must specify max_steps > 0"):
        train_and_evaluate(est, TrainSpec(input_fn(), max_steps=0), EvalSpec(input_fn()))
    with pytest.raises(UsageError, match="Must specify throttle_secs >= 0"):
        train_and_evaluate(est, TrainSpec(input_fn()), EvalSpec(input_fn(), throttle_secs=-1))
    with pytest.raises(InvalidTypeError, match="`input_fn` must be callable"):
        train_and_evaluate(est, TrainSpec(input_fn()), EvalSpec("eval.csv"))


def test_run_config_type_checks() -> None:
    with pytest.raises(UsageError, match='device_fn must be callable with exactly one argument'):
        RunConfig(device_fn=lambda a, b: None)
