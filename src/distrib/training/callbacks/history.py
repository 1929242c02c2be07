"""``History``: the per-epoch record ``fit`` returns.

Example:
    >>> h = History()
    >>> h.on_train_begin()
    >>> h.on_epoch_end(0, {"loss": 0.5, "accuracy": 0.8})
    >>> h.on_epoch_end(1, {"loss": 0.25, "accuracy": 0.9})
    >>> h.history, h.epoch
    ({'loss': [0.5, 0.25], 'accuracy': [0.8, 0.9]}, [0, 1])
"""

from __future__ import annotations

from typing import Any

from distrib.training.callbacks.base import Callback, Logs

__all__ = ["History"]


class History(Callback):
    """Records the logs of every epoch; ``fit`` adds one and returns it.

    Attributes:
        history: ``{name: [value of epoch 0, value of epoch 1, ...]}``.
        epoch: the indices of the epochs recorded.
        params: the run's parameters (``verbose``, ``epochs``, ``steps``).

    Example::

        history = model.fit(train, epochs=10, validation_data=test)
        history.history["val_loss"]      # one value per epoch
    """

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[Any]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.epoch = []

    def get_state(self) -> dict[str, Any]:
        """The epochs and values recorded so far."""
        return {"epoch": list(self.epoch), "history": {k: list(v) for k, v in
                                                       self.history.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        self.epoch = [int(e) for e in state["epoch"]]
        self.history = {str(k): list(v) for k, v in state["history"].items()}
        if self.model is not None:
            self.model.history = self

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)
        if self.model is not None:
            self.model.history = self
