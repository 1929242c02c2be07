"""``LearningRateScheduler``: set the learning rate at the start of every epoch, or step a
torch LR scheduler every epoch or every batch.

Example:
    >>> import math, torch
    >>> class Model:
    ...     optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
    >>> def schedule(epoch, lr):
    ...     return lr if epoch < 10 else lr * math.exp(-0.1)
    >>> cb = LearningRateScheduler(schedule)
    >>> cb.set_model(Model())
    >>> for epoch in range(15):
    ...     cb.on_epoch_begin(epoch)
    >>> round(Model.optimizer.param_groups[0]["lr"], 5)
    0.00607
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from numbers import Real
from typing import Any

import torch

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.learning_rate import get_lr, set_lr
from distrib.training.callbacks.output import print_msg, to_python

__all__ = ["LearningRateScheduler"]


def _takes_lr(schedule: Callable[..., Any]) -> bool:
    """Whether ``schedule`` accepts ``(epoch, lr)``; Keras also accepts ``(epoch)``."""
    try:
        params = inspect.signature(schedule).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


class LearningRateScheduler(Callback):
    """Sets the learning rate to ``schedule(epoch, lr)`` before every epoch, as Keras does.

    Args:
        schedule: a function of the epoch index (0-based) and the current learning
            rate returning the new rate (a function of the epoch only also works); or a
            torch LR scheduler (``torch.optim.lr_scheduler.StepLR(model.optimizer, ...)``,
            made on the model's optimizer after ``compile``), stepped after every epoch
            or, with ``interval="batch"``, after every batch (``ReduceLROnPlateau``
            steps on the logged ``monitor``).
        verbose: 1 prints the rate set at every epoch.
        interval: ``"epoch"`` or ``"batch"``: when a torch scheduler steps.
        monitor: the logged value ``ReduceLROnPlateau`` steps on.

    The rate of every param group of ``model.optimizer`` is set; the epoch logs get
    an ``lr`` entry with the rate used.

    Example::

        model.fit(train, epochs=20, callbacks=[
            LearningRateScheduler(lambda epoch, lr: lr * 0.9 if epoch >= 5 else lr)])
    """

    def __init__(self, schedule: Any, verbose: int = 0, interval: str = "epoch",
                 monitor: str = "val_loss") -> None:
        super().__init__()
        if is_torch_scheduler(schedule):
            if interval not in ("epoch", "batch"):
                raise UsageError(explain("interval", interval, "a torch LR scheduler is "
                                         "stepped every 'epoch' or every 'batch'",
                                         "pass interval='epoch' or interval='batch'"))
        elif not callable(schedule):
            raise InvalidTypeError(explain("LearningRateScheduler schedule", schedule,
                                           "must be a function of the epoch (and the current "
                                           "learning rate) returning the learning rate",
                                           "pass e.g. schedule=lambda epoch, lr: lr * 0.9"))
        self.schedule = schedule
        self.verbose = verbose
        self.interval = interval
        self.monitor = monitor
        self._torch = is_torch_scheduler(schedule)
        self._applied_epoch: int | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._applied_epoch = None
        if self._torch:
            _check_bound(self.schedule, self.model.optimizer)

    def get_state(self) -> dict[str, Any]:
        """The last epoch whose rate was set (a resumed epoch is not scheduled twice), and
        a torch scheduler's state."""
        state: dict[str, Any] = {"applied_epoch": self._applied_epoch}
        if self._torch:
            state["scheduler"] = self.schedule.state_dict()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        applied = state.get("applied_epoch")
        self._applied_epoch = None if applied is None else int(applied)
        if self._torch and state.get("scheduler") is not None:
            self.schedule.load_state_dict(state["scheduler"])

    def _step_torch(self, logs: Logs | None) -> None:
        if isinstance(self.schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            value = (logs or {}).get(self.monitor)
            if value is None:
                raise UsageError(explain(
                    "LearningRateScheduler monitor", self.monitor,
                    "ReduceLROnPlateau steps on a logged metric, and the logs hold only "
                    + ", ".join(sorted(logs or {})), "pass monitor= one of those"))
            self.schedule.step(float(to_python(value)))
        else:
            self.schedule.step()

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        if self._torch and self.interval == "batch":
            self._step_torch(logs)

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        if self._torch:
            return
        if epoch == self._applied_epoch:
            return  # resumed inside this epoch: the optimizer holds its rate already
        self._applied_epoch = epoch
        lr = get_lr(self.model.optimizer)
        if _takes_lr(self.schedule):
            new_lr = self.schedule(epoch, lr)
        else:  # the old API: schedule(epoch)
            new_lr = self.schedule(epoch)
        new_lr = to_python(new_lr)
        if not isinstance(new_lr, Real) or isinstance(new_lr, bool):
            raise InvalidTypeError(explain(
                "LearningRateScheduler schedule output", new_lr,
                f'The output of the "schedule" function should be float. Got: {new_lr}',
                "return a float learning rate from schedule(epoch, lr)"))
        set_lr(self.model.optimizer, float(new_lr))
        if self.verbose > 0:
            print_msg(self.model, f"\nEpoch {epoch + 1}: LearningRateScheduler setting "
                      f"learning rate to {new_lr}.")

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if logs is not None:
            logs["lr"] = get_lr(self.model.optimizer)
        if self._torch and self.interval == "epoch":
            self._step_torch(logs)


def is_torch_scheduler(schedule: Any) -> bool:
    """Whether ``schedule`` is a torch LR scheduler (``fit(callbacks=[scheduler])`` steps it
    after every epoch, as :class:`LearningRateScheduler` does)."""
    return isinstance(schedule, (torch.optim.lr_scheduler.LRScheduler,
                                 torch.optim.lr_scheduler.ReduceLROnPlateau))


def _check_bound(scheduler: Any, optimizer: Any) -> None:
    """A torch scheduler steps the optimizer it was made on: it must be the model's."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if scheduler.optimizer is not inner:
        raise UsageError(explain(
            "LearningRateScheduler", type(scheduler).__name__,
            "the torch LR scheduler was made on another optimizer than the model's "
            "(it would change a learning rate nobody uses)",
            "make it on model.optimizer after compile, e.g. "
            "torch.optim.lr_scheduler.StepLR(model.optimizer, step_size=10)"))
    if getattr(inner, "has_schedule", False):
        raise UsageError(explain(
            "LearningRateScheduler", type(scheduler).__name__,
            "the model's optimizer follows a learning-rate schedule already",
            "give the optimizer a float learning_rate, or drop the torch scheduler"))
