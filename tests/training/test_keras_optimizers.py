"""distrib.optimizers' Keras classes and schedules give Keras 3's numbers.

The expected values were computed once with Keras 3.15 / TensorFlow 2.21 by
tests/training/golden/keras_optimizers.py (float64 variables, fixed gradients); this
test needs no TensorFlow. torch's update rules add ``epsilon`` outside the square root
where Keras adds it inside (or before the bias correction): the tolerance covers that
difference of the order of ``epsilon`` and nothing more.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np
import pytest
import torch

import distrib
from distrib.errors import ContextError, InvalidTypeError, UsageError
from tests.support import run_python
from tests.training.golden import keras_optimizers as spec

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "keras_optimizers.json")
                    .read_text())


class Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, shape in spec.SHAPES.items():
            value = torch.tensor(spec.start(name), dtype=torch.float64).reshape(shape)
            self.register_parameter(name, torch.nn.Parameter(value))


def _build(value: Any) -> Any:
    if isinstance(value, tuple):
        cls, kwargs = value
        return getattr(distrib.optimizers.schedules, cls)(**kwargs)
    return value


def _train(case: str) -> tuple[Pair, Any, list[dict[str, list[float]]]]:
    cls, kwargs, exclude = spec.CASES[case]
    opt = getattr(distrib.optimizers, cls)(**{k: _build(v) for k, v in kwargs.items()})
    if exclude:
        opt.exclude_from_weight_decay(var_names=exclude)
    net = Pair()
    opt = distrib.optimizers.get(opt, net.parameters)
    seen = []
    for step in range(spec.STEPS):
        for name, p in net.named_parameters():
            p.grad = torch.tensor(spec.gradient(name, step), dtype=torch.float64
                                  ).reshape(p.shape)
        opt.step()
        opt.zero_grad()
        seen.append({n: p.detach().reshape(-1).tolist() for n, p in net.named_parameters()})
    return net, opt, seen


@pytest.mark.parametrize("case", sorted(spec.CASES))
def test_optimizer_matches_keras(case: str) -> None:
    net, opt, seen = _train(case)
    expected = GOLDEN["optimizers"][case]
    for step, (mine, keras) in enumerate(zip(seen, expected["steps"])):
        for name in spec.SHAPES:
            assert mine[name] == pytest.approx(keras[name], rel=1e-5, abs=1e-6), \
                f"{case}: {name} after step {step + 1}"
    if "finalized" in expected:
        opt.finalize_variable_values()
        for name, p in net.named_parameters():
            assert p.detach().reshape(-1).tolist() == pytest.approx(
                expected["finalized"][name], rel=1e-6), f"{case}: EMA of {name}"


@pytest.mark.parametrize("name", sorted(spec.SCHEDULES))
def test_schedule_matches_keras(name: str) -> None:
    cls, kwargs = spec.SCHEDULES[name]
    fn = getattr(distrib.optimizers.schedules, cls)(**kwargs)
    mine = [fn(step) for step in range(spec.SCHEDULE_STEPS)]
    # Keras computes in float32 (the dtype of initial_learning_rate)
    assert mine == pytest.approx(GOLDEN["schedules"][name], rel=2e-6, abs=1e-9)


def test_schedule_config_round_trip() -> None:
    schedules = distrib.optimizers.schedules
    for cls, kwargs in spec.SCHEDULES.values():
        fn = getattr(schedules, cls)(**kwargs)
        again = schedules.deserialize(schedules.serialize(fn))
        assert [again(s) for s in range(9)] == [fn(s) for s in range(9)]


def test_learning_rate_is_readable_and_assignable_on_the_model() -> None:
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(3, 1))
        model.compile(optimizer=distrib.optimizers.Adam(learning_rate=0.001), loss="mse")
    assert model.optimizer.learning_rate == 0.001
    model.optimizer.learning_rate = 0.05
    assert model.optimizer.param_groups[0]["lr"] == 0.05
    assert distrib.optimizers.learning_rate(model.optimizer) == 0.05
    with pytest.raises(UsageError):
        model.optimizer.learning_rate = -1.0


def test_a_name_builds_the_keras_class_and_fit_uses_its_schedule() -> None:
    x = torch.linspace(-1, 1, 32, dtype=torch.float64).reshape(16, 2)
    y = x.sum(dim=1, keepdim=True)
    schedule = distrib.optimizers.schedules.PiecewiseConstantDecay([2], [0.1, 0.01])
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(2, 1).double())
        model.compile(optimizer=distrib.optimizers.SGD(schedule), loss="mse")
    seen: list[float] = []
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False,
              callbacks=[distrib.callbacks.LambdaCallback(
                  on_train_batch_begin=lambda b, logs: seen.append(
                      model.optimizer.learning_rate))])
    assert seen == [0.1, 0.1, 0.1, 0.01]  # the step count 0, 1, 2 then 3 > 2
    assert model.optimizer.iterations == 4
    with pytest.raises(InvalidTypeError, match="not settable"):
        model.optimizer.learning_rate = 0.5
    with pytest.raises(InvalidTypeError, match="not settable"):
        distrib.optimizers.set_learning_rate(model.optimizer, 0.5)


def test_accumulation_leaves_weights_until_the_nth_step_and_counts_updates() -> None:
    net, opt, seen = _train("accumulation")
    assert seen[0] == seen[1] and seen[1] != seen[2]
    assert opt.iterations == spec.STEPS // 3


def test_state_dict_round_trip_keeps_iterations_average_and_accumulators() -> None:
    net, opt, _ = _train("ema")
    state = opt.state_dict()
    other_net = Pair()
    other = distrib.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9).build(other_net)
    other_net.load_state_dict(net.state_dict())
    other.load_state_dict(state)
    assert other.iterations == opt.iterations == spec.STEPS
    opt.finalize_variable_values()
    other.finalize_variable_values()
    for a, b in zip(net.parameters(), other_net.parameters()):
        assert torch.equal(a, b)


def test_keras_argument_errors() -> None:
    with pytest.raises(UsageError, match="Only one of"):
        distrib.optimizers.SGD(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(UsageError, match="gradient_accumulation_steps"):
        distrib.optimizers.Adam(gradient_accumulation_steps=1)
    with pytest.raises(UsageError, match="ema_momentum"):
        distrib.optimizers.Adam(use_ema=True, ema_momentum=1.5)
    with pytest.raises(UsageError, match="learning_rate"):
        distrib.optimizers.Adam(learning_rate=math.nan)
    with pytest.raises(UsageError, match="boundaries"):
        distrib.optimizers.schedules.PiecewiseConstantDecay([1, 2], [1.0])
    opt = distrib.optimizers.Adam()
    opt.build(torch.nn.Linear(2, 1))
    with pytest.raises(ContextError, match="already built"):
        opt.build(torch.nn.Linear(2, 1))
    with pytest.raises(ContextError, match="before the optimizer is built"):
        opt.exclude_from_weight_decay(var_names=["bias"])


def test_torch_calling_convention_builds_a_plain_optimizer() -> None:
    """A parameter-server task rebuilds an optimizer as ``cls(param_groups)``."""
    w = torch.nn.Parameter(torch.ones(2))
    opt = distrib.optimizers.AdamW([{"params": [w], "lr": 0.5}])
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["lr"] == 0.5


PROGRAM = str(pathlib.Path(__file__).parent / "programs" / "keras_optimizer_program.py")


def _run(mode: str, out: pathlib.Path, replicas: int) -> list[dict[str, Any]]:
    proc = run_python([PROGRAM, mode, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(f"{out}.rank{r}", weights_only=True) for r in range(replicas)]


@pytest.mark.slow
def test_transforms_apply_to_the_reduced_gradient_as_one_process_on_the_global_batch(
        tmp_path: pathlib.Path) -> None:
    """global_clipnorm, weight decay, accumulation and EMA under MirroredStrategy and
    CentralStorageStrategy end where one process on the global batch ends: clipping sees
    the gradient summed over replicas (clipping each replica's part would not)."""
    (oracle,) = _run("oracle", tmp_path / "oracle", 1)
    (unclipped,) = _run("oracle_unclipped", tmp_path / "unclipped", 1)
    assert oracle["iterations"] == 6 * 2 // 2  # 6 steps an epoch, one update in two
    assert any((oracle["weights"][k] - unclipped["weights"][k]).abs().max() > 1e-3
               for k in oracle["weights"])  # clipping acts on every update
    for mode in ("mirrored", "central_storage"):
        for got in _run(mode, tmp_path / mode, 2):
            assert got["iterations"] == oracle["iterations"], mode
            assert got["loss"] == pytest.approx(oracle["loss"], rel=1e-9), mode
            for key, value in oracle["weights"].items():
                diff = (got["weights"][key] - value).abs().max().item()
                assert diff < 1e-9, f"{mode}: {key} differs by {diff}"


def test_lr_callbacks_set_a_keras_optimizer_and_are_refused_under_a_schedule() -> None:
    x = torch.linspace(-1, 1, 16, dtype=torch.float64).reshape(8, 2)
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(2, 1).double())
        model.compile(optimizer=distrib.optimizers.Adam(0.1), loss="mse")
    model.fit(x, x, batch_size=4, epochs=2, verbose=0, callbacks=[
        distrib.callbacks.LearningRateScheduler(lambda epoch, lr: lr / 2)])
    assert model.optimizer.learning_rate == pytest.approx(0.025)
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(2, 1).double())
        model.compile(optimizer=distrib.optimizers.Adam(
            distrib.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5)), loss="mse")
    with pytest.raises(InvalidTypeError, match="not settable"):
        model.fit(x, x, batch_size=4, epochs=1, verbose=0, callbacks=[
            distrib.callbacks.LearningRateScheduler(lambda epoch, lr: lr / 2)])


def test_under_loss_scaling_the_rate_is_readable_and_gradients_are_clipped_unscaled() -> None:
    distrib.mixed_precision.set_global_policy("mixed_float16")
    try:
        with distrib.OneDeviceStrategy("cpu").scope():
            model = distrib.Model(torch.nn.Linear(2, 1))
            model.compile(optimizer=distrib.optimizers.SGD(0.5, global_clipnorm=1e-3),
                          loss="mse")
        model.set_weights([np.full((1, 2), 0.1, np.float32), np.full(1, 0.1, np.float32)])
        x = torch.full((4, 2), 0.5)  # float16 gradients far from overflow at the first scale
        before = [w.copy() for w in model.get_weights()]
        model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0)
    finally:
        distrib.mixed_precision.set_global_policy("float32")
    assert model.optimizer.learning_rate == 0.5
    model.optimizer.learning_rate = 0.25
    assert model.optimizer.inner_optimizer.learning_rate == 0.25
    moved = sum(float(((torch.as_tensor(a) - torch.as_tensor(b)) ** 2).sum())
                for a, b in zip(model.get_weights(), before)) ** 0.5
    assert moved == pytest.approx(0.5 * 1e-3, rel=1e-2)  # lr x the clipped global norm


def test_parameter_server_strategies_refuse_what_their_tasks_would_skip(monkeypatch) -> None:
    from distrib.distribute import context

    class Extended:
        should_use_with_coordinator = True

    class ParameterServerStrategy:
        extended = Extended()

    monkeypatch.setattr(context, "has_strategy", lambda: True)
    monkeypatch.setattr(context, "get_strategy", lambda: ParameterServerStrategy())
    distrib.optimizers.Adam(0.1).build(torch.nn.Linear(2, 1))  # a rate alone is fine
    with pytest.raises(UsageError, match="parameter servers"):
        distrib.optimizers.Adam(0.1, clipnorm=1.0).build(torch.nn.Linear(2, 1))
    # An optimizer built before, outside the strategy, is refused when built again
    # on the same parameters under it (compile builds it again).
    net = torch.nn.Linear(2, 1)
    monkeypatch.setattr(context, "has_strategy", lambda: False)
    ema = distrib.optimizers.Adam(0.1, use_ema=True).build(net)
    monkeypatch.setattr(context, "has_strategy", lambda: True)
    with pytest.raises(UsageError, match="parameter servers"):
        ema.build(net)
