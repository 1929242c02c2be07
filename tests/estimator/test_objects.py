"""Objects made in model_fn are created once and reused across calls and modes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import distrib
from distrib.errors import UsageError
from distrib.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig
from distrib.estimator.objects import ObjectStore, snake_name
from tests.estimator.common import input_fn

SEEN: list[tuple[str, int, int, int]] = []


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)       # made by Net's __init__: part of Net, not reused apart
        self.last = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.first(x)))


def recording_model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
    net = Net()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    metric = distrib.metrics.Mean()
    predictions = net(features["x"])
    state = optimizer.state.get(net.first.weight, {})
    SEEN.append((mode, id(net), id(optimizer), int(state.get("step", 0))))
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions=predictions)
    loss = nn.functional.mse_loss(predictions, labels)
    metric.update_state(loss.detach())
    return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={"m": metric})


def test_modules_and_optimizers_are_made_once_and_reused_in_every_mode(tmp_path: Path) -> None:
    SEEN.clear()
    est = Estimator(recording_model_fn, model_dir=str(tmp_path))
    est.train(input_fn(repeat=True), steps=4)
    est.evaluate(input_fn(), steps=2)
    list(est.predict(input_fn()))
    assert len({s[1] for s in SEEN}) == 1 and len({s[2] for s in SEEN}) == 1
    train_steps = [s[3] for s in SEEN if s[0] == ModeKeys.TRAIN]
    assert train_steps == [0, 0, 1, 2, 3]   # the build call, then Adam's step count grows
    assert {s[0] for s in SEEN} == {ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT}


def test_the_build_call_changes_no_module_state() -> None:
    bn_stats: list[torch.Tensor] = []

    def fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        norm = nn.BatchNorm1d(4)
        bn_stats.append(norm.running_mean.clone())     # before this call's forward
        out = nn.functional.dropout(norm(features["x"]), 0.5, training=norm.training)
        loss = out.pow(2).mean() + norm.weight.sum() * 0
        return EstimatorSpec(mode, loss=loss, train_op=torch.optim.SGD(norm.parameters(), 0.1))

    est = Estimator(fn, config=RunConfig(save_checkpoints_secs=None))
    torch.manual_seed(5)
    est.train(input_fn(repeat=True), steps=1)
    assert len(bn_stats) == 2   # the build call, then the step
    assert torch.equal(bn_stats[1], torch.zeros(4))     # the build call updated nothing


def test_a_construction_the_first_call_did_not_make_raises() -> None:
    calls = {"n": 0}

    def fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        calls["n"] += 1
        net = nn.Linear(4, 1)
        if calls["n"] > 2:
            net = nn.Sequential(net)
        loss = nn.functional.mse_loss(net(features["x"]), labels)
        return EstimatorSpec(mode, loss=loss, train_op=torch.optim.SGD(net.parameters(), 0.1))

    with pytest.raises(UsageError, match="created a Sequential that its earlier calls"):
        Estimator(fn).train(input_fn(repeat=True), steps=3)


def test_changed_constructor_arguments_raise() -> None:
    rates = iter([0.1, 0.1, 0.2])

    def fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        net = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=next(rates))
        loss = nn.functional.mse_loss(net(features["x"]), labels)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)

    with pytest.raises(UsageError, match=r"lr=0.2.*created it with.*lr=0.1"):
        Estimator(fn).train(input_fn(repeat=True), steps=3)


def test_store_reuses_by_class_and_order_and_names_objects() -> None:
    store = ObjectStore()

    def fn() -> tuple[nn.Module, nn.Module, nn.Module]:
        a, b = nn.Linear(2, 2), nn.Linear(2, 3)
        return a, b, nn.Sequential(a, b)

    first = store.call(fn, build=True)
    again = store.call(fn)
    assert all(x is y for x, y in zip(first, again))
    assert type(again[2]) is nn.Sequential
    assert sorted(store.trackable()) == ["sequential"]
    assert sorted(store.names().values()) == ["linear", "linear_1", "sequential"]
    assert nn.Linear(2, 2) is not first[0]           # outside a call: ordinary construction
    assert snake_name(torch.optim.lr_scheduler.StepLR) == "step_lr"


def test_copies_made_in_model_fn_are_ordinary_objects() -> None:
    import copy

    store = ObjectStore()

    def fn() -> tuple[nn.Module, nn.Module]:
        net = nn.Linear(2, 2)
        return net, copy.deepcopy(net)

    first = store.call(fn, build=True)
    again = store.call(fn)
    assert again[0] is first[0] and again[1] is not first[1]
    assert type(again[1]) is nn.Linear
    assert store.objects == [first[0]]


def test_torch_compile_still_trains_after_the_reuse_hook_is_installed() -> None:
    # The hook replaces the base classes' __new__ for the whole process; torch.compile's
    # backward copies fx modules, whose constructors take arguments object.__new__ refuses.
    from distrib.estimator.objects import install_reuse

    install_reuse()
    net = nn.Linear(3, 1)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = net(x).sum()
        loss.backward()
        return loss

    compiled = torch.compile(step, backend="aot_eager")
    x = torch.ones(2, 3)
    assert torch.equal(compiled(x), step(x))
    assert net.weight.grad is not None
