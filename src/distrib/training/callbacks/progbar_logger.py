"""``ProgbarLogger``: the progress bar of ``fit``, ``evaluate`` and ``predict``.

``fit(verbose=1)`` adds one (``count_mode="steps"``); it prints the Keras lines::

    Epoch 1/5
    938/938 [==============================] - 3s 2ms/step - loss: 0.2970 - accuracy: 0.9140

Only the chief prints.  During ``fit`` the validation pass is silent; its results
appear as the ``val_`` values of the epoch line.  The finished line shows the steps
that really ran: when the data run out before ``steps_per_epoch``, an epoch that ran
16 of 100 steps ends ``16/100 [====>....]`` (TensorFlow prints ``100/100`` there).

Example:
    >>> cb = ProgbarLogger(count_mode="steps")
    >>> cb.set_params({"verbose": 2, "epochs": 1, "steps": 2})
    >>> cb.on_train_begin()
    >>> cb.on_epoch_begin(0)
    >>> cb.on_epoch_end(0, {"loss": 0.25})  # doctest: +ELLIPSIS
    2/2 - 0s - loss: 0.2500 - ...
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from distrib.errors import UsageError, explain
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import should_print
from distrib.training.progbar import Progbar

__all__ = ["ProgbarLogger"]


class ProgbarLogger(Callback):
    """Prints the progress bar and the metrics, as ``tf.keras.callbacks.ProgbarLogger``.

    Args:
        count_mode: ``"steps"`` (count batches) or ``"samples"`` (count examples,
            from the ``size`` entry of the batch logs).
        stateful_metrics: names of values shown as given rather than averaged over
            the steps.  By default every value is shown as given: the logs of
            ``fit`` already hold running epoch averages (Keras passes the names of
            all the model's metrics, loss included, which comes to the same).

    Example::

        model.fit(train, epochs=5, verbose=0, callbacks=[ProgbarLogger("steps")])
    """

    def __init__(self, count_mode: str = "samples",
                 stateful_metrics: Iterable[str] | None = None) -> None:
        super().__init__()
        if count_mode not in ("samples", "steps"):
            raise UsageError(explain(
                "ProgbarLogger count_mode", count_mode,
                f'Unknown `count_mode`: {count_mode}. Expected values are ["samples", "steps"]',
                'pass count_mode="steps" to count batches or "samples" to count examples'))
        self.use_steps = count_mode == "steps"
        self._all_stateful = stateful_metrics is None
        self.stateful_metrics: set[str] = set(stateful_metrics or ())
        self.seen = 0
        self.progbar: Progbar | None = None
        self.target: int | None = None
        self.verbose = 1
        self.epochs = 1
        self._call_batch_hooks = True
        self._called_in_fit = False
        self._steps_before: int | None = None

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        verbose = params.get("verbose", 1)
        self.verbose = 1 if verbose == "auto" else int(verbose)
        self.epochs = int(params.get("epochs") or 1)
        key = "steps" if self.use_steps else "samples"
        self.target = params.get(key)
        self._call_batch_hooks = self.verbose == 1 or self.target is None

    def _active(self) -> bool:
        return bool(self.verbose) and should_print(self.model)

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._called_in_fit = True  # validation inside fit is silent

    def on_train_end(self, logs: Logs | None = None) -> None:
        self._called_in_fit = False

    def on_test_begin(self, logs: Logs | None = None) -> None:
        if not self._called_in_fit:
            self._reset_progbar()

    def on_predict_begin(self, logs: Logs | None = None) -> None:
        self._reset_progbar()

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        self._reset_progbar()
        self._steps_before = getattr(self.model, "_train_counter", None)
        if self._active() and self.epochs > 1:
            print(f"Epoch {epoch + 1}/{self.epochs}", flush=True)

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        self._batch_update(batch, logs)

    def on_test_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        if not self._called_in_fit:
            self._batch_update(batch, logs)

    def on_predict_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        self._batch_update(batch, None)  # predictions are not shown

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        counter = getattr(self.model, "_train_counter", None)
        if self.use_steps and isinstance(counter, int) and isinstance(self._steps_before, int):
            self.seen = counter - self._steps_before  # the steps that really ran
        self._finalize(logs)

    def on_test_end(self, logs: Logs | None = None) -> None:
        if not self._called_in_fit:
            self._finalize(logs)

    def on_predict_end(self, logs: Logs | None = None) -> None:
        self._finalize(logs)

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        """About 30 refreshes per bar (validation inside ``fit`` shows none)."""
        if not self._call_batch_hooks or (in_fit and mode == "test") or mode == "predict":
            return 0
        return max(1, steps // 30) if steps else 10

    def _implements_train_batch_hooks(self) -> bool:
        return self._call_batch_hooks and should_print(self.model)

    def _implements_test_batch_hooks(self) -> bool:
        return self._call_batch_hooks and should_print(self.model)

    def _implements_predict_batch_hooks(self) -> bool:
        return self._call_batch_hooks and should_print(self.model)

    def _reset_progbar(self) -> None:
        """Starts a new bar (its clock starts now, before the first step)."""
        self.seen = 0
        self.progbar = None
        if self._active():
            self._progbar_for({})

    def _progbar_for(self, logs: Logs) -> Progbar:
        if self.progbar is None:
            self.progbar = Progbar(target=self.target, verbose=self.verbose,
                                   stateful_metrics=self.stateful_metrics,
                                   unit_name="step" if self.use_steps else "sample")
        if self._all_stateful:
            self.progbar._update_stateful_metrics(logs)
        return self.progbar

    def _batch_update(self, batch: int, logs: Logs | None) -> None:
        if not self._active():
            return
        values = dict(logs or {})
        if self.use_steps:
            self.seen = batch + 1  # one-based
        else:
            size = values.pop("size", 0)
            self.seen += int(values.pop("num_steps", 1)) * int(size)
            values.pop("batch", None)
        progbar = self._progbar_for(values)
        if self.verbose == 1:
            progbar.update(self.seen, list(values.items()), finalize=False)

    def _finalize(self, logs: Logs | None) -> None:
        if not self._active():
            return
        values = dict(logs or {})
        progbar = self._progbar_for(values)
        if self.target is None:
            self.target = self.seen  # unknown size: learnt from the first epoch
            progbar.target = self.target
        ran = self.seen if self.use_steps and 0 < self.seen < self.target else self.target
        progbar.update(ran, list(values.items()), finalize=True)
