"""``LambdaCallback``: a callback made of plain functions.

Example:
    >>> cb = LambdaCallback(on_epoch_end=lambda epoch, logs: print(epoch, logs["loss"]))
    >>> cb.on_epoch_end(0, {"loss": 0.5})
    0 0.5
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.callbacks.base import Callback

__all__ = ["LambdaCallback"]

_HOOKS = (
    "on_epoch_begin", "on_epoch_end", "on_batch_begin", "on_batch_end", "on_train_begin",
    "on_train_end", "on_train_batch_begin", "on_train_batch_end", "on_test_begin",
    "on_test_end", "on_test_batch_begin", "on_test_batch_end", "on_predict_begin",
    "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end",
)


class LambdaCallback(Callback):
    """Calls the given functions at the matching events, as Keras's ``LambdaCallback``.

    Args:
        on_epoch_begin, on_epoch_end: called as ``f(epoch, logs)``.
        on_batch_begin, on_batch_end: called as ``f(batch, logs)`` for training batches.
        on_train_begin, on_train_end: called as ``f(logs)``.
        **hooks: any other hook by its name, e.g. ``on_test_end=lambda logs: ...``.

    Example::

        losses = []
        model.fit(train, epochs=3, callbacks=[
            LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))])
    """

    def __init__(self, on_epoch_begin: Callable[..., Any] | None = None,
                 on_epoch_end: Callable[..., Any] | None = None,
                 on_batch_begin: Callable[..., Any] | None = None,
                 on_batch_end: Callable[..., Any] | None = None,
                 on_train_begin: Callable[..., Any] | None = None,
                 on_train_end: Callable[..., Any] | None = None,
                 **hooks: Callable[..., Any]) -> None:
        super().__init__()
        unknown = sorted(set(hooks) - set(_HOOKS))
        if unknown:
            raise UsageError(explain(
                "LambdaCallback argument", unknown[0], "is not a callback hook",
                "use one of " + ", ".join(_HOOKS)))
        given = dict(on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end,
                     on_batch_begin=on_batch_begin, on_batch_end=on_batch_end,
                     on_train_begin=on_train_begin, on_train_end=on_train_end, **hooks)
        for name, fn in given.items():
            if fn is not None and not callable(fn):
                raise InvalidTypeError(explain(f"LambdaCallback {name}", fn, "must be a "
                                               "function", f"pass {name}=lambda ...: ..."))
            if fn is not None:
                setattr(self, name, fn)
