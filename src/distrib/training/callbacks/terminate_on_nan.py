"""``TerminateOnNaN``: stop training as soon as the loss becomes NaN or infinite.

The batch loss is global, so every replica stops after the same batch.

Example:
    >>> class Model:
    ...     stop_training = False
    >>> cb = TerminateOnNaN()
    >>> cb.set_model(Model())
    >>> cb.on_train_batch_end(7, {"loss": float("nan")})
    Batch 7: Invalid loss, terminating training
    >>> cb.model.stop_training
    True
"""

from __future__ import annotations

import numpy as np

from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import print_msg, to_python

__all__ = ["TerminateOnNaN"]


class TerminateOnNaN(Callback):
    """Sets ``model.stop_training`` when a batch's ``loss`` is NaN or infinite.

    Example::

        model.fit(train, epochs=10, callbacks=[TerminateOnNaN()])
    """

    def on_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        value = np.asarray(to_python(loss), dtype=np.float64)
        if np.isnan(value).any() or np.isinf(value).any():
            print_msg(self.model, f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True
