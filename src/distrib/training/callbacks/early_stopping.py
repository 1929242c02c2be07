"""``EarlyStopping``: stop ``fit`` when a monitored metric stops improving.

The monitored value comes from the epoch logs, which are global (identical on every
replica), so every replica stops at the same epoch.

Example:
    >>> class Model:
    ...     stop_training = False
    >>> model = Model()
    >>> es = EarlyStopping(monitor="loss", patience=1)
    >>> es.set_model(model)
    >>> es.on_train_begin()
    >>> for epoch, loss in enumerate([0.5, 0.4, 0.45, 0.46]):
    ...     es.on_epoch_end(epoch, {"loss": loss})
    ...     if model.stop_training:
    ...         break
    >>> epoch, es.stopped_epoch
    (2, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import print_msg, warn

__all__ = ["EarlyStopping"]


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has stopped improving, as Keras's ``EarlyStopping``.

    Args:
        monitor: the log entry to watch (``"val_loss"``, ``"loss"``, ``"val_accuracy"``...).
        min_delta: the smallest change counted as an improvement.
        patience: epochs without improvement after which training stops.
        verbose: 1 prints the epoch training stopped at and the weights restore.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (``max`` for names ending in
            ``acc``, ``accuracy`` or ``auc``, else ``min``).
        baseline: training stops if the model does not improve on this value within
            ``patience`` epochs.
        restore_best_weights: at the end of training, set the weights of the best
            epoch (via ``model.get_weights`` / ``model.set_weights``).
        start_from_epoch: epochs to wait before monitoring starts (warm-up).

    Example::

        model.fit(train, epochs=100, validation_data=test,
                  callbacks=[EarlyStopping(patience=3, restore_best_weights=True)])
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0) -> None:
        super().__init__()
        checks.text("EarlyStopping monitor", monitor, "pass the name of a logged metric, "
                    "e.g. monitor='val_loss'")
        checks.count("EarlyStopping patience", patience)
        checks.number("EarlyStopping min_delta", min_delta)
        checks.number("EarlyStopping baseline", baseline, optional=True)
        checks.flag("EarlyStopping restore_best_weights", restore_best_weights)
        checks.count("EarlyStopping start_from_epoch", start_from_epoch)
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.min_delta = abs(min_delta)
        self.wait = 0
        self.stopped_epoch = 0
        self.restore_best_weights = restore_best_weights
        self.best_weights: Any = None
        self.best_epoch = 0
        self.start_from_epoch = start_from_epoch
        if mode not in ("auto", "min", "max"):
            warn(None, "EarlyStopping mode %s is unknown, fallback to auto mode.", mode)
            mode = "auto"
        maximize = mode == "max" or (mode == "auto" and monitor.endswith(("acc", "accuracy", "auc")))
        self.monitor_op: Callable[[Any, Any], Any] = np.greater if maximize else np.less
        self.min_delta *= 1 if maximize else -1
        self.best: float = -np.inf if maximize else np.inf

    def on_train_begin(self, logs: Logs | None = None) -> None:
        # Allow instances to be re-used.
        self.wait = 0
        self.stopped_epoch = 0
        self.best = np.inf if self.monitor_op is np.less else -np.inf
        self.best_weights = None
        self.best_epoch = 0

    def get_state(self) -> dict[str, Any]:
        """``wait``, ``best``, ``best_epoch``, ``stopped_epoch`` and the best weights."""
        return {"wait": self.wait, "stopped_epoch": self.stopped_epoch, "best": self.best,
                "best_epoch": self.best_epoch, "best_weights": self.best_weights}

    def set_state(self, state: dict[str, Any]) -> None:
        self.wait = int(state["wait"])
        self.stopped_epoch = int(state["stopped_epoch"])
        self.best = state["best"]
        self.best_epoch = int(state["best_epoch"])
        self.best_weights = state["best_weights"]

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        current = self.get_monitor_value(logs)
        if current is None or epoch < self.start_from_epoch:
            return  # no value, or still warming up
        if self.restore_best_weights and self.best_weights is None:
            # Keep the first monitored epoch's weights in case nothing improves.
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            # Only restart waiting if we beat both the baseline and our previous best.
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs: Logs | None = None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print_msg(self.model, f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print_msg(self.model, "Restoring model weights from the end of the best "
                          f"epoch: {self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)

    def get_monitor_value(self, logs: Logs | None) -> Any:
        """The monitored value in ``logs``, or None (with a warning) when it is absent."""
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None:
            warn(self.model, "Early stopping conditioned on metric `%s` which is not "
                 "available. Available metrics are: %s", self.monitor, ",".join(logs))
        return value

    def _is_improvement(self, monitor_value: Any, reference_value: Any) -> bool:
        return bool(self.monitor_op(monitor_value - self.min_delta, reference_value))
