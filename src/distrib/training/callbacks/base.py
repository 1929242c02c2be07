"""``Callback`` and ``CallbackList``: the hooks ``fit``, ``evaluate`` and ``predict`` call.

They follow ``tf.keras.callbacks`` exactly: a callback has ``model`` and ``params``
attributes and one method per event; a :class:`CallbackList` forwards each event to
all its callbacks, adding ``History`` and ``ProgbarLogger`` as Keras does.

In a distributed run every replica process runs the same callbacks with the same
logs: the logs ``fit`` passes are global values (sums and counts all-reduced over the
replicas), so decisions taken from them — stopping early, lowering the learning rate
— are the same on every replica.  What is meant for a person or for disk (messages,
progress bar, CSV rows, TensorBoard events, checkpoint files) is written by the chief
only; ``should_print`` and ``should_write`` tell a callback whether this
process is the chief (``distrib.training.callbacks.output``).

Example:
    >>> class Count(Callback):
    ...     def on_epoch_end(self, epoch, logs=None):
    ...         print(f"epoch {epoch}: loss {logs['loss']:.2f}")
    >>> callbacks = CallbackList([Count()], epochs=1, steps=1, verbose=0)
    >>> callbacks.on_epoch_end(0, {"loss": 0.5})
    epoch 0: loss 0.50
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from distrib.errors import InvalidTypeError, explain
from distrib.training.callbacks.output import to_python

__all__ = ["Callback", "CallbackList", "Logs", "callbacks_for_run"]

Logs = dict[str, Any]

class Callback:
    """Base class of callbacks: subclass it and override the hooks you need.

    Attributes:
        model: the ``distrib.Model`` being trained (set by ``set_model``).
        params: the run's parameters, e.g. ``{"verbose": 1, "epochs": 10, "steps": 938}``.

    Example:
        >>> class PrintLoss(Callback):
        ...     def on_train_batch_end(self, batch, logs=None):
        ...         print(batch, logs["loss"])
        >>> PrintLoss().on_train_batch_end(0, {"loss": 0.7})
        0 0.7
    """

    model: Any = None
    params: dict[str, Any] = {}  # replaced (never mutated) by set_params

    def __init__(self) -> None:
        self.model = None
        self.params = {}
        self.validation_data: Any = None

    def set_params(self, params: dict[str, Any]) -> None:
        """Sets the run's parameters (``verbose``, ``epochs``, ``steps``)."""
        self.params = params

    def set_model(self, model: Any) -> None:
        """Sets the model the callback acts on."""
        self.model = model

    def on_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """A backwards compatibility alias for ``on_train_batch_begin``."""

    def on_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """A backwards compatibility alias for ``on_train_batch_end``."""

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        """Called at the start of epoch ``epoch`` (0-based) of ``fit``."""

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        """Called at the end of an epoch; ``logs`` holds the epoch's metrics and,
        when validation ran, the ``val_`` metrics."""

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Called before training batch ``batch`` (0-based within the epoch)."""
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Called after a training batch; ``logs`` holds the running epoch metrics."""
        self.on_batch_end(batch, logs=logs)

    def on_test_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Called before a batch of ``evaluate`` (or of validation in ``fit``)."""

    def on_test_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Called after a batch of ``evaluate`` (or of validation in ``fit``)."""

    def on_predict_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Called before a batch of ``predict``."""

    def on_predict_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Called after a batch of ``predict``."""

    def on_train_begin(self, logs: Logs | None = None) -> None:
        """Called when ``fit`` starts."""

    def on_train_end(self, logs: Logs | None = None) -> None:
        """Called when ``fit`` ends; ``logs`` are the last epoch's logs."""

    def on_test_begin(self, logs: Logs | None = None) -> None:
        """Called when ``evaluate`` (or validation in ``fit``) starts."""

    def on_test_end(self, logs: Logs | None = None) -> None:
        """Called when ``evaluate`` (or validation in ``fit``) ends, with its results."""

    def on_predict_begin(self, logs: Logs | None = None) -> None:
        """Called when ``predict`` starts."""

    def on_predict_end(self, logs: Logs | None = None) -> None:
        """Called when ``predict`` ends."""

    def get_state(self) -> dict[str, Any] | None:
        """The callback's state, backed up with training (``BackupAndRestore``); None: none.

        A callback that keeps counters or records across epochs returns them here so
        that a resumed ``fit`` continues exactly; the values must be numbers, strings,
        numpy arrays, tensors, or dicts/lists/tuples of them.

        Example:
            >>> Callback().get_state() is None
            True
        """
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (called after ``on_train_begin``)."""

    def resume_training(self, training_state: Any) -> tuple[int, int] | None:
        """Called by ``fit`` after ``on_train_begin`` with its training state.

        A callback that restores training from a backup (``BackupAndRestore``) restores
        ``training_state`` and returns the ``(epoch, step)`` to resume at; every other
        callback returns None.
        """
        return None

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        """How often this callback reads the logs of ``mode``'s batch hooks.

        ``mode`` is ``"train"``, ``"test"`` or ``"predict"``; ``steps`` the batches of the
        epoch (None when unknown); ``in_fit`` whether a ``"test"`` pass is ``fit``'s
        validation.  0: never (logs may be stale); 1: at every batch; ``n``: at every
        ``n``-th batch.  Global logs cost a collective, so ``fit`` computes them only as
        often as some callback needs them.  The answer must not depend on the replica
        (it decides when every replica joins that collective).  By default: every batch
        if the callback overrides a batch hook of ``mode``, else never.

        Example:
            >>> class EveryTen(Callback):
            ...     def on_train_batch_end(self, batch, logs=None): ...
            ...     def batch_log_interval(self, mode, steps, in_fit):
            ...         return 10 if mode == "train" else 0
            >>> EveryTen().batch_log_interval("train", 100, False)
            10
        """
        overridden = {"train": ("on_batch_begin", "on_batch_end", "on_train_batch_begin",
                                "on_train_batch_end"),
                      "test": ("on_test_batch_begin", "on_test_batch_end"),
                      "predict": ("on_predict_batch_begin", "on_predict_batch_end")}[mode]
        return 0 if all(_is_default(getattr(self, name)) for name in overridden) else 1

    def _implements_train_batch_hooks(self) -> bool:
        """Whether ``fit`` must call this callback's training batch hooks."""
        return not all(_is_default(getattr(self, name)) for name in (
            "on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end"))

    def _implements_test_batch_hooks(self) -> bool:
        """Whether ``evaluate`` must call this callback's batch hooks."""
        return not (_is_default(self.on_test_batch_begin)
                    and _is_default(self.on_test_batch_end))

    def _implements_predict_batch_hooks(self) -> bool:
        """Whether ``predict`` must call this callback's batch hooks."""
        return not (_is_default(self.on_predict_batch_begin)
                    and _is_default(self.on_predict_batch_end))


_DEFAULT_BATCH_HOOKS = frozenset(
    getattr(Callback, name) for name in (
        "on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end",
        "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin",
        "on_predict_batch_end"))


def _is_default(method: Any) -> bool:
    """Whether ``method`` is ``Callback``'s own (empty) batch hook, not an override."""
    return getattr(method, "__func__", None) in _DEFAULT_BATCH_HOOKS


def _flatten(callbacks: Any) -> list[Callback]:
    if callbacks is None:
        return []
    if isinstance(callbacks, (list, tuple)):
        return [cb for item in callbacks for cb in _flatten(item)]
    from distrib.training.callbacks import learning_rate_scheduler as lrs  # (a cycle at import)
    if lrs.is_torch_scheduler(callbacks):  # torch's habit: stepped after every epoch
        return [lrs.LearningRateScheduler(callbacks)]
    if not isinstance(callbacks, Callback):
        raise InvalidTypeError(explain("callbacks", callbacks, "must be a list of "
                                       "distrib.training.callbacks.Callback objects",
                                       "pass e.g. callbacks=[EarlyStopping(patience=2)]; "
                                       "subclass Callback for your own"))
    return [callbacks]


class CallbackList:
    """Calls a list of callbacks together, as ``tf.keras.callbacks.CallbackList``.

    Args:
        callbacks: the callbacks (a nested list is flattened).
        add_history: add a ``History`` callback unless one is in ``callbacks``.
        add_progbar: add a ``ProgbarLogger(count_mode="steps")`` unless one is there.
        model: the model, given to every callback (``set_model``); the ``History``
            callback becomes ``model.history``.
        **params: the run's parameters (``verbose``, ``epochs``, ``steps``), given to
            every callback (``set_params``).

    Example (a custom training loop driving callbacks by hand)::

        callbacks = CallbackList([EarlyStopping(monitor="loss")], add_history=True,
                                 model=model, verbose=0, epochs=10, steps=None)
        callbacks.on_train_begin()
        for epoch in range(10):
            callbacks.on_epoch_begin(epoch)
            for step, batch in enumerate(dataset):
                callbacks.on_train_batch_begin(step)
                logs = train_step(batch)
                callbacks.on_train_batch_end(step, logs)
            callbacks.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
        callbacks.on_train_end(logs)
    """

    def __init__(self, callbacks: Iterable[Callback] | Callback | None = None,
                 add_history: bool = False, add_progbar: bool = False,
                 model: Any = None, **params: Any) -> None:
        self.callbacks: list[Callback] = _flatten(callbacks)
        self.model: Any = None
        self.params: dict[str, Any] = {}
        self._history: Callback | None = None
        self._progbar: Callback | None = None
        self._add_default_callbacks(add_history, add_progbar)
        if model is not None:
            self.set_model(model)
        if params:
            self.set_params(params)
        self._refresh_batch_flags()

    def _add_default_callbacks(self, add_history: bool, add_progbar: bool) -> None:
        from distrib.training.callbacks.history import History
        from distrib.training.callbacks.progbar_logger import ProgbarLogger

        for cb in self.callbacks:
            if isinstance(cb, ProgbarLogger):
                self._progbar = cb
            elif isinstance(cb, History):
                self._history = cb
        if self._history is None and add_history:
            self._history = History()
            self.callbacks.append(self._history)
        if self._progbar is None and add_progbar:
            self._progbar = ProgbarLogger(count_mode="steps")
            self.callbacks.append(self._progbar)

    def _refresh_batch_flags(self) -> None:
        self._call_train_batch = any(cb._implements_train_batch_hooks() for cb in self.callbacks)
        self._call_test_batch = any(cb._implements_test_batch_hooks() for cb in self.callbacks)
        self._call_predict_batch = any(
            cb._implements_predict_batch_hooks() for cb in self.callbacks)

    def append(self, callback: Callback) -> None:
        """Adds a callback at the end of the list."""
        self.callbacks.append(callback)
        if self.model is not None:
            callback.set_model(self.model)
        if self.params:
            callback.set_params(self.params)
        self._refresh_batch_flags()

    def __iter__(self) -> Iterator[Callback]:
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    def set_params(self, params: dict[str, Any]) -> None:
        """Gives ``params`` to every callback."""
        self.params = params
        for cb in self.callbacks:
            cb.set_params(params)
        self._refresh_batch_flags()

    def set_model(self, model: Any) -> None:
        """Gives ``model`` to every callback and sets ``model.history``."""
        self.model = model
        if self._history is not None:
            model.history = self._history
        for cb in self.callbacks:
            cb.set_model(model)
        self._refresh_batch_flags()

    @staticmethod
    def _process_logs(logs: Logs | None) -> Logs:
        """A fresh dict (shared by the callbacks of one event) with tensors as numbers."""
        if logs is None:
            return {}
        return {key: to_python(value) for key, value in logs.items()}

    def _call(self, hook: str, *args: Any, logs: Logs | None = None) -> None:
        processed = self._process_logs(logs)
        for cb in self.callbacks:
            getattr(cb, hook)(*args, processed)

    def on_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Alias of :meth:`on_train_batch_begin`."""
        self.on_train_batch_begin(batch, logs)

    def on_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Alias of :meth:`on_train_batch_end`."""
        self.on_train_batch_end(batch, logs)

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        """Calls ``on_epoch_begin`` of every callback."""
        self._call("on_epoch_begin", epoch, logs=logs)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        """Calls ``on_epoch_end`` of every callback (they share one logs dict)."""
        self._call("on_epoch_end", epoch, logs=logs)

    @property
    def calls_train_batch_hooks(self) -> bool:
        """Whether some callback implements a training batch hook (else those calls do nothing)."""
        return self._call_train_batch

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_train_batch_begin`` of every callback that implements batch hooks."""
        if self._call_train_batch:
            self._call("on_train_batch_begin", batch, logs=logs)

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_train_batch_end`` of every callback that implements batch hooks."""
        if self._call_train_batch:
            self._call("on_train_batch_end", batch, logs=logs)

    def on_test_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_test_batch_begin`` of every callback."""
        if self._call_test_batch:
            self._call("on_test_batch_begin", batch, logs=logs)

    def on_test_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_test_batch_end`` of every callback."""
        if self._call_test_batch:
            self._call("on_test_batch_end", batch, logs=logs)

    def on_predict_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_predict_batch_begin`` of every callback."""
        if self._call_predict_batch:
            self._call("on_predict_batch_begin", batch, logs=logs)

    def on_predict_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        """Calls ``on_predict_batch_end`` of every callback."""
        if self._call_predict_batch:
            self._call("on_predict_batch_end", batch, logs=logs)

    def on_train_begin(self, logs: Logs | None = None) -> None:
        """Calls ``on_train_begin`` of every callback."""
        self._call("on_train_begin", logs=logs)

    def resume_training(self, training_state: Any) -> tuple[int, int] | None:
        """The ``(epoch, step)`` the first callback that restores training returns, or None."""
        point = None
        for cb in self.callbacks:
            answer = cb.resume_training(training_state)
            if point is None and answer is not None:
                point = answer
        return point

    def on_train_end(self, logs: Logs | None = None) -> None:
        """Calls ``on_train_end`` of every callback."""
        self._call("on_train_end", logs=logs)

    def on_test_begin(self, logs: Logs | None = None) -> None:
        """Calls ``on_test_begin`` of every callback."""
        self._call("on_test_begin", logs=logs)

    def on_test_end(self, logs: Logs | None = None) -> None:
        """Calls ``on_test_end`` of every callback."""
        self._call("on_test_end", logs=logs)

    def on_predict_begin(self, logs: Logs | None = None) -> None:
        """Calls ``on_predict_begin`` of every callback."""
        self._call("on_predict_begin", logs=logs)

    def on_predict_end(self, logs: Logs | None = None) -> None:
        """Calls ``on_predict_end`` of every callback."""
        self._call("on_predict_end", logs=logs)


def callbacks_for_run(callbacks: Any, model: Any, verbose: int, epochs: int,
                      steps: int | None, add_history: bool) -> CallbackList:
    """The ``CallbackList`` that ``fit``, ``evaluate`` or ``predict`` drives.

    ``callbacks`` is a list (History and a progress bar are added as Keras adds them) or a
    ``CallbackList`` the user built (given the model and the run's parameters).

    Example::

        cbs = callbacks_for_run([EarlyStopping()], model, 1, epochs=3, steps=10,
                                add_history=True)
    """
    if isinstance(callbacks, CallbackList):
        callbacks.set_model(model)
        callbacks.set_params({"verbose": verbose, "epochs": epochs, "steps": steps})
        return callbacks
    return CallbackList(callbacks, add_history=add_history, add_progbar=verbose != 0,
                        model=model, verbose=verbose, epochs=epochs, steps=steps)
