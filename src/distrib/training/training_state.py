"""``TrainingState``: everything an exact resume of ``fit`` needs, as one checkpointable object.

``fit`` creates one per call and hands it to the callbacks (``resume_training``).
As a :class:`~distrib.Checkpoint` object it holds the model (module, optimizer,
metric states, step counter), the data position, every callback's state, the random
generators, and where ``fit`` stands (epoch, steps done in it, whether training
stopped).  ``fit`` reports its progress (:meth:`batch_done` after the batch
callbacks ran, :meth:`epoch_done` after the epoch callbacks ran and the replicas
agreed on stopping) and calls the listeners — ``BackupAndRestore`` saves there, so a
backup always reflects every callback's view of the same step.

Example::

    class Backup(distrib.callbacks.Callback):
        def resume_training(self, training_state):
            training_state.add_listener(lambda event: print(event, training_state.step))
            return None
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from distrib.checkpoint import RNGState
from distrib.training.data_adapter import cast_batch
from distrib.training.model_state import build_metrics, metrics_pending

__all__ = ["TrainingState"]


class _Progress:
    def __init__(self, owner: TrainingState) -> None:
        self._owner = owner

    def state_dict(self) -> dict[str, Any]:
        o = self._owner
        return {"epoch": o.epoch, "step": o.step,
                "stop_training": bool(getattr(o.model, "stop_training", False))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        o = self._owner
        o.epoch, o.step = int(state["epoch"]), int(state["step"])
        o.model.stop_training = bool(state["stop_training"])
        o.restored = True


class _DataPosition:
    def __init__(self, handler: Any) -> None:
        self._handler = handler

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = self._handler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._handler.load_state_dict(state)


class _CallbackStates:
    """Every callback's ``get_state()``, saved by each replica (the chief's CSV offset
    differs from the others')."""

    def __init__(self, callbacks: Iterable[Any]) -> None:
        self._callbacks = list(callbacks)

    def _keyed(self) -> dict[str, Any]:
        """Callbacks by class name (``Name#2`` for a second one): extra callbacks of
        other classes in a resumed run do not shift the keys."""
        out: dict[str, Any] = {}
        for cb in self._callbacks:
            name, n = type(cb).__name__, 1
            while (name if n == 1 else f"{name}#{n}") in out:
                n += 1
            out[name if n == 1 else f"{name}#{n}"] = cb
        return out

    def local_state_dict(self) -> dict[str, Any]:
        out = {}
        for key, cb in self._keyed().items():
            state = cb.get_state()
            if state is not None:
                out[key] = state
        return out

    def load_local_state_dict(self, states: Sequence[dict[str, Any]], replica_id: int,
                              num_replicas: int) -> None:
        if not states:
            return
        mine = states[replica_id % len(states)]
        for key, cb in self._keyed().items():
            if key in mine:
                cb.set_state(mine[key])


class TrainingState:
    """Where a ``fit`` stands, and what to back up to resume it exactly.

    Attributes:
        model: the ``distrib.Model``.
        epoch: the current epoch (0-based).
        step: training steps done in the current epoch.
        epochs: the ``epochs`` argument of ``fit``.
        restored: whether the state was restored from a backup.
    """

    def __init__(self, model: Any, handler: Any, callbacks: Any, epochs: int) -> None:
        self.model = model
        self.handler = handler
        self.callbacks = callbacks
        self.epochs = epochs
        self.epoch = 0
        self.step = 0
        self.restored = False
        self._listeners: list[Callable[[str], None]] = []
        self._resume_step = 0

    def checkpoint_children(self) -> dict[str, Any]:
        """The objects a backup saves (see the module docstring)."""
        return {"model": self.model, "data": _DataPosition(self.handler),
                "callbacks": _CallbackStates(list(self.callbacks)),
                "progress": _Progress(self), "rng": RNGState()}

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener("batch")`` / ``listener("epoch")`` at every reported point."""
        self._listeners.append(listener)

    def resume(self, initial_epoch: int) -> int:
        """Ask the callbacks to restore; returns the epoch to start at."""
        point: tuple[int, int] | None = self.callbacks.resume_training(self)
        if point is None:
            self.epoch, self.step = initial_epoch, 0
            return initial_epoch
        epoch, step = point
        if metrics_pending(self.model):  # no batch has built the metrics yet
            sample = self.handler.sample()
            if sample is not None:  # with the cast every batch of fit gets (uint8, float64)
                first = next(self.model.parameters(), None)
                device = first.device if first is not None else torch.device("cpu")
                dtype = first.dtype if first is not None and first.is_floating_point() \
                    else None
                build_metrics(self.model, cast_batch(sample, device, dtype))
        if self.model.stop_training and step == 0:
            return self.epochs  # training had stopped: nothing left to run
        self.epoch, self.step, self._resume_step = epoch, step, step
        return epoch

    def begin_epoch(self, epoch: int) -> int:
        """Note the start of ``epoch``; returns the step it starts at (non-zero once, when
        resuming inside it)."""
        start, self._resume_step = self._resume_step, 0
        self.epoch, self.step = epoch, start
        return start

    def _notify(self, event: str) -> None:
        for listener in self._listeners:
            listener(event)

    def batch_done(self, steps_done: int) -> None:
        """``fit`` ran the batch callbacks after ``steps_done`` steps of the epoch."""
        self.step = steps_done
        if self._listeners:
            self._notify("batch")

    def epoch_done(self, epoch: int) -> None:
        """``fit`` finished ``epoch`` (callbacks ran, stopping agreed)."""
        self.epoch, self.step = epoch + 1, 0
        self._notify("epoch")
