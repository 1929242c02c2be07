"""``ReduceLROnPlateau``: lower the learning rate when a metric stops improving.

The learning rate is that of ``model.optimizer`` (a torch optimizer): every param
group's ``"lr"`` is multiplied by ``factor``.  The monitored value is global, so every
replica lowers its rate at the same epoch.

Example:
    >>> import torch
    >>> class Model:
    ...     optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    >>> cb = ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)
    >>> cb.set_model(Model())
    >>> cb.on_train_begin()
    >>> for epoch, loss in enumerate([1.0, 1.0, 1.0]):
    ...     cb.on_epoch_end(epoch, {"loss": loss})
    >>> Model.optimizer.param_groups[0]["lr"]
    0.25
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distrib.errors import UsageError, explain
from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.learning_rate import get_lr, set_lr
from distrib.training.callbacks.output import print_msg, warn

__all__ = ["ReduceLROnPlateau"]


class ReduceLROnPlateau(Callback):
    """Reduces the learning rate when ``monitor`` has stopped improving, as Keras does.

    Args:
        monitor: the log entry to watch.
        factor: ``new_lr = lr * factor`` (must be below 1).
        patience: epochs without improvement before the rate is reduced.
        verbose: 1 prints a line at every reduction.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (``max`` when ``monitor`` contains
            ``acc``, else ``min``).
        min_delta: the smallest change counted as an improvement.
        cooldown: epochs to wait after a reduction before counting again.
        min_lr: the rate is never reduced below this.

    Example::

        model.fit(train, epochs=50, validation_data=test,
                  callbacks=[ReduceLROnPlateau(factor=0.2, patience=5, min_lr=1e-3)])
    """

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10,
                 verbose: int = 0, mode: str = "auto", min_delta: float = 1e-4,
                 cooldown: int = 0, min_lr: float = 0) -> None:
        super().__init__()
        checks.number("ReduceLROnPlateau factor", factor, low=0.0)
        checks.count("ReduceLROnPlateau patience", patience)
        checks.count("ReduceLROnPlateau cooldown", cooldown)
        checks.number("ReduceLROnPlateau min_lr", min_lr, low=0.0)
        checks.number("ReduceLROnPlateau min_delta", min_delta)
        checks.text("ReduceLROnPlateau monitor", monitor, "pass e.g. monitor='val_loss'")
        if factor >= 1.0:
            raise UsageError(explain(
                "ReduceLROnPlateau factor", factor,
                f"ReduceLROnPlateau does not support a factor >= 1.0. Got {factor}",
                "pass a factor below 1, such as 0.1 or 0.5"))
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.cooldown_counter = 0
        self.wait = 0
        self.best = 0.0
        self.mode = mode
        self.monitor_op: Callable[[Any, Any], bool] = lambda a, b: False
        self._reset()

    def _reset(self) -> None:
        """Resets the wait and cooldown counters and the best value."""
        if self.mode not in ("auto", "min", "max"):
            warn(self.model, "Learning rate reduction mode %s is unknown, fallback to auto mode.",
                 self.mode)
            self.mode = "auto"
        if self.mode == "min" or (self.mode == "auto" and "acc" not in self.monitor):
            self.monitor_op = lambda a, b: bool(np.less(a, b - self.min_delta))
            self.best = np.inf
        else:
            self.monitor_op = lambda a, b: bool(np.greater(a, b + self.min_delta))
            self.best = -np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._reset()

    def get_state(self) -> dict[str, Any]:
        """``wait``, ``cooldown_counter`` and ``best`` (the rate itself is the optimizer's)."""
        return {"wait": self.wait, "cooldown_counter": self.cooldown_counter,
                "best": self.best}

    def set_state(self, state: dict[str, Any]) -> None:
        self.wait = int(state["wait"])
        self.cooldown_counter = int(state["cooldown_counter"])
        self.best = state["best"]

    def in_cooldown(self) -> bool:
        """Whether the callback is waiting out its cooldown after a reduction."""
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        logs = logs if logs is not None else {}
        logs["lr"] = get_lr(self.model.optimizer)
        current = logs.get(self.monitor)
        if current is None:
            warn(self.model, "Learning rate reduction is conditioned on metric `%s` which is "
                 "not available. Available metrics are: %s", self.monitor, ",".join(logs))
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                self._reduce(epoch)

    def _reduce(self, epoch: int) -> None:
        old_lr = get_lr(self.model.optimizer)
        if old_lr > np.float32(self.min_lr):
            new_lr = max(old_lr * self.factor, self.min_lr)
            set_lr(self.model.optimizer, new_lr)
            if self.verbose > 0:
                print_msg(self.model, f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing "
                          f"learning rate to {new_lr}.")
            self.cooldown_counter = self.cooldown
            self.wait = 0
