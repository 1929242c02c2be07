"""``LearningRateScheduler``: set the learning rate at the start of every epoch.

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

from distrib.errors import InvalidTypeError, explain
from distrib.training.callbacks.base import Callback, Logs, get_lr, print_msg, set_lr, to_python

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
            rate returning the new rate (a function of the epoch only also works).
        verbose: 1 prints the rate set at every epoch.

    The rate of every param group of ``model.optimizer`` is set; the epoch logs get
    an ``lr`` entry with the rate used.

    Example::

        model.fit(train, epochs=20, callbacks=[
            LearningRateScheduler(lambda epoch, lr: lr * 0.9 if epoch >= 5 else lr)])
    """

    def __init__(self, schedule: Callable[..., Any], verbose: int = 0) -> None:
        super().__init__()
        if not callable(schedule):
            raise InvalidTypeError(explain("LearningRateScheduler schedule", schedule,
                                           "must be a function of the epoch (and the current "
                                           "learning rate) returning the learning rate",
                                           "pass e.g. schedule=lambda epoch, lr: lr * 0.9"))
        self.schedule = schedule
        self.verbose = verbose
        self._applied_epoch: int | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._applied_epoch = None

    def get_state(self) -> dict[str, Any]:
        """The last epoch whose rate was set (a resumed epoch is not scheduled twice)."""
        return {"applied_epoch": self._applied_epoch}

    def set_state(self, state: dict[str, Any]) -> None:
        applied = state.get("applied_epoch")
        self._applied_epoch = None if applied is None else int(applied)

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
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
