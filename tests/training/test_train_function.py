"""The step fit runs: Keras' default step made once per fit equals ``Model.train_step``.

``fit`` runs the default step with the model's parts resolved once when the model
overrides nothing in it; these tests train the same model both ways (a subclass whose
``train_step`` only calls the base one takes the general path) and require the same
weights, bit for bit, and the same logs, and check every case that must take the
general path at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.training import Model, losses
from distrib.training.train_function import DefaultStep


class GeneralPath(Model):
    def train_step(self, data: Any) -> Any:
        return super().train_step(data)


def _data(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    return rng.rand(n, 6), rng.randint(0, 3, n).astype("int64")


def _model(cls: type[Model], metrics: Any = None) -> Model:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    model = cls(net)
    model.compile(optimizer=torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                  loss=losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=metrics)
    return model


def _fit(cls: type[Model], metrics: Any = None, **kwargs: Any
         ) -> tuple[Model, dict[str, list[float]]]:
    x, y = _data()
    model = _model(cls, metrics)
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, **kwargs)
    return model, history.history


def _same_weights(a: Model, b: Model) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("metrics", [None, ["accuracy"]])
def test_the_default_step_trains_exactly_as_train_step(metrics: Any) -> None:
    fast, fast_logs = _fit(Model, metrics)
    general, general_logs = _fit(GeneralPath, metrics)
    assert isinstance(fast._make_train_function(), DefaultStep)
    assert not isinstance(general._make_train_function(), DefaultStep)
    _same_weights(fast, general)
    assert fast_logs == general_logs
    assert fast._train_counter == general._train_counter == 6


def test_sample_and_class_weights_take_the_general_path_with_the_same_result() -> None:
    x, y = _data()
    weights = np.linspace(0.5, 1.5, len(y))
    runs = []
    for cls in (Model, GeneralPath):
        model = _model(cls)
        history = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
                            sample_weight=weights, class_weight={0: 1.0, 1: 2.0, 2: 0.5})
        runs.append((model, history.history))
    _same_weights(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_a_hook_added_during_fit_runs_at_every_later_step() -> None:
    calls: list[int] = []
    x, y = _data()
    model = _model(Model)

    class AddHook(distrib.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if batch == 1:
                model.register_forward_hook(lambda *_: calls.append(1))

    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[AddHook()])
    assert len(calls) == 2  # steps 1 and 2 of the 3


def test_overriding_any_part_of_the_step_runs_train_step() -> None:
    class OwnLoss(Model):
        def compute_loss(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            return super().compute_loss(*args, **kwargs)

    class OwnCall(Model):
        def call(self, inputs: Any, training: bool | None = None) -> Any:
            return self.module(inputs)

    for cls in (OwnLoss, OwnCall):
        assert not isinstance(_model(cls)._make_train_function(), DefaultStep), cls
    uncompiled = Model(nn.Linear(2, 2))
    assert not isinstance(uncompiled._make_train_function(), DefaultStep)


def test_calling_the_model_runs_its_hooks_and_autocast_as_nn_module_does() -> None:
    model = _model(Model)
    seen: list[str] = []
    model.register_forward_pre_hook(lambda *_: seen.append("pre"))
    model.register_forward_hook(lambda *_: seen.append("post"))
    model(torch.zeros(2, 6, dtype=torch.float64), training=False)
    assert seen == ["pre", "post"] and not model.training


class _CountBatches(distrib.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ends: list[int] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.ends.append(batch)


class _StopsAtStep(Model):
    """Sets ``stop_training`` from inside its step, at the fourth step."""

    def train_step(self, data: Any) -> Any:
        out = super().train_step(data)
        if self._train_counter == 3:
            self.stop_training = True
        return out


@pytest.mark.parametrize("cls", [Model, _StopsAtStep])
def test_an_epoch_without_batch_hooks_runs_the_same_steps_as_one_with_them(cls: Any) -> None:
    # With no batch hook and no batch logs wanted, fit's loop leaves out the calls that
    # would do nothing; a callback with a batch hook brings them back.
    quiet, quiet_logs = _fit(cls, ["accuracy"])
    counter = _CountBatches()
    hooked, hooked_logs = _fit(cls, ["accuracy"], callbacks=[counter])
    _same_weights(quiet, hooked)
    assert quiet_logs == hooked_logs
    assert quiet._train_counter == hooked._train_counter == len(counter.ends)
    assert counter.ends == ([0, 1, 2, 0, 1, 2] if cls is Model else [0, 1, 2, 0])


def test_the_compiled_loss_per_step_call_equals_the_container_call() -> None:
    from distrib.training.compile_utils import LossesContainer

    y, pred = torch.tensor([0, 2, 1]), torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    both = []
    for per_step in (False, True):
        container = LossesContainer(losses.SparseCategoricalCrossentropy(from_logits=True))
        first = container(y, pred, None, 6, 2)  # builds it: one output
        call = container.step_loss() if per_step else container
        second = call(y[:2], pred[:2], None, 6, 2)
        both.append((first, second, float(container.metrics[0].result())))
    assert both[0] == both[1]
    multi = LossesContainer("mse")
    multi((torch.zeros(2, 1), torch.zeros(2, 1)), (torch.ones(2, 1), torch.ones(2, 1)))
    assert multi.step_loss() == multi.__call__  # several outputs: the general call
