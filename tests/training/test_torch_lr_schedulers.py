"""torch LR schedulers given to fit (through LearningRateScheduler) step per epoch or per batch."""

from __future__ import annotations

import pytest
import torch

import distrib
from distrib.errors import UsageError
from distrib.training.callbacks import LambdaCallback, LearningRateScheduler


def _model(lr: float = 0.1) -> distrib.Model:
    with distrib.OneDeviceStrategy("cpu").scope():
        model = distrib.Model(torch.nn.Linear(2, 1).double())
        model.compile(optimizer=distrib.optimizers.SGD(lr), loss="mse")
    return model


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.linspace(-1, 1, 32, dtype=torch.float64).reshape(16, 2)
    return x, x.sum(dim=1, keepdim=True)


def test_a_torch_scheduler_steps_after_every_epoch() -> None:
    model = _model()
    sched = torch.optim.lr_scheduler.StepLR(model.optimizer, step_size=1, gamma=0.5)
    history = model.fit(*_data(), batch_size=4, epochs=3, verbose=0,
                        callbacks=[LearningRateScheduler(sched)])
    assert history.history["lr"] == pytest.approx([0.1, 0.05, 0.025])
    assert model.optimizer.learning_rate == pytest.approx(0.0125)


def test_a_torch_scheduler_steps_after_every_batch() -> None:
    model = _model()
    sched = torch.optim.lr_scheduler.LambdaLR(model.optimizer, lambda step: 1 / (step + 1))
    seen: list[float] = []
    model.fit(*_data(), batch_size=4, epochs=2, verbose=0, callbacks=[
        LearningRateScheduler(sched, interval="batch"),
        LambdaCallback(on_train_batch_begin=lambda b, logs: seen.append(
            model.optimizer.learning_rate))])
    assert seen == pytest.approx([0.1 / (s + 1) for s in range(8)])


def test_reduce_on_plateau_steps_on_the_monitored_value() -> None:
    model = _model()
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(model.optimizer, patience=0,
                                                       factor=0.5, threshold=10.0)
    history = model.fit(*_data(), batch_size=4, epochs=3, verbose=0,
                        callbacks=[LearningRateScheduler(sched, monitor="loss")])
    assert history.history["lr"] == pytest.approx([0.1, 0.05, 0.025])  # never 10x better


def test_a_scheduler_on_another_optimizer_is_refused() -> None:
    model = _model()
    other = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    with pytest.raises(UsageError, match="another optimizer than the model's"):
        model.fit(*_data(), batch_size=4, epochs=1, verbose=0, callbacks=[
            LearningRateScheduler(torch.optim.lr_scheduler.StepLR(other, 1))])
    with pytest.raises(UsageError, match="interval"):
        LearningRateScheduler(torch.optim.lr_scheduler.StepLR(other, 1), interval="step")


def test_a_torch_scheduler_given_as_a_callback_steps_after_every_epoch() -> None:
    model = _model()
    sched = torch.optim.lr_scheduler.ExponentialLR(model.optimizer, gamma=0.5)
    model.fit(*_data(), batch_size=4, epochs=3, verbose=0, callbacks=[sched])
    assert model.optimizer.learning_rate == pytest.approx(0.1 / 8)
