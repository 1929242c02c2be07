"""The epoch loop: the one loop of epochs that ``Model.fit`` runs on, on every strategy.

Per ``fit``: the callbacks' ``on_train_begin``; the progress resumes (``BackupAndRestore``
may move the first epoch, or find training over); then per epoch: the progress notes its
start (the step it resumes at, non-zero once when resuming inside it), the
:class:`EpochProgram` begins it (False: the data has no step left for it, and the loop
ends), ``on_epoch_begin``, the program trains the epoch from that step, validates when
``validation_freq`` says so (its logs join the epoch's with a ``val_`` prefix),
``on_epoch_end``, the program decides whether training stops (the same answer on every
replica), and the progress notes the epoch done (a backup saves there).  At the end the
program finishes training and ``on_train_end`` gets the last epoch's logs.

What differs between ``fit`` on the replicas of a strategy (whose steps run on
:class:`~distrib.engine.StepLoop`) and ``fit`` under ParameterServerStrategy (whose chief
schedules each step on a worker) is the program; the callbacks and the progress
(``TrainingState``) are the same objects for both.  The loop runs once per epoch and adds
nothing to a step.

Example::

    training = TrainingState(model, handler, callbacks, epochs)
    logs = EpochLoop(program, callbacks, training, validation_freq=1).run(0, epochs)
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Protocol

__all__ = ["EpochProgram", "EpochCallbacks", "EpochProgress", "EpochLoop", "validates"]

Logs = dict[str, Any]


class EpochProgram(Protocol):
    """What trains: the epochs of one ``fit`` on this process."""

    def begin_epoch(self, epoch: int, start: int, first: bool) -> bool:
        """Prepare ``epoch`` from step ``start`` (``first``: the first epoch this ``fit``
        runs); False when the data has no step left for it (an epoch that would run no
        step is neither begun nor logged, and training ends)."""
        ...

    def train_epoch(self, epoch: int, start: int) -> Logs:
        """Train ``epoch`` from step ``start``; returns the epoch's logs."""
        ...

    def validate(self) -> Logs:
        """Validate (after an epoch that ``validation_freq`` selects); returns the
        validation logs."""
        ...

    def stop(self) -> bool:
        """After ``on_epoch_end``: whether training stops (a stop requested, the data ran
        out); every replica must return the same answer."""
        ...

    def end(self) -> None:
        """Training ended, before ``on_train_end`` (Keras: EMA weights replace the
        trained ones)."""
        ...


class EpochCallbacks(Protocol):
    """The epoch hooks of the callbacks (``CallbackList``)."""

    def on_train_begin(self, logs: Logs | None = None) -> None:
        """Before the first epoch."""
        ...

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        """Before an epoch's steps."""
        ...

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        """After an epoch (and its validation)."""
        ...

    def on_train_end(self, logs: Logs | None = None) -> None:
        """After the last epoch, with its logs."""
        ...


class EpochProgress(Protocol):
    """Where training stands, for an exact resume (``TrainingState``)."""

    def resume(self, initial_epoch: int) -> int:
        """After ``on_train_begin``: the epoch to start at (a backup may move it; at or
        past the last epoch when training was over)."""
        ...

    def begin_epoch(self, epoch: int) -> int:
        """Note the start of ``epoch``; returns the step it starts at."""
        ...

    def epoch_done(self, epoch: int) -> None:
        """``epoch`` is over: its callbacks ran and the stop was agreed."""
        ...


def validates(epoch: int, freq: int | Container[int]) -> bool:
    """Whether ``validation_freq`` selects ``epoch`` (0-based): every ``freq``-th epoch for
    an int (NumPy's too), else the 1-based epochs it lists (Keras' rule).

    >>> [e for e in range(6) if validates(e, 2)], [e for e in range(6) if validates(e, [1, 6])]
    ([1, 3, 5], [0, 5])
    """
    if isinstance(freq, Container):
        return epoch + 1 in freq
    return (epoch + 1) % int(freq) == 0


class EpochLoop:
    """Runs the epochs of one ``fit`` (see the module docstring).

    Args:
        program: trains and validates the epochs.
        callbacks: the epoch hooks.
        progress: where training stands (resume, epoch start and end).
        validation_freq: which epochs validate (:func:`validates`); None: none (no
            validation data).
    """

    def __init__(self, program: EpochProgram, callbacks: EpochCallbacks,
                 progress: EpochProgress,
                 validation_freq: int | Container[int] | None = None) -> None:
        self.program = program
        self.callbacks = callbacks
        self.progress = progress
        self.validation_freq = validation_freq

    def run(self, initial_epoch: int, epochs: int) -> Logs:
        """Train epochs ``initial_epoch`` (or where a backup resumes) to ``epochs``;
        returns the last epoch's logs."""
        program, callbacks, progress = self.program, self.callbacks, self.progress
        callbacks.on_train_begin()
        first = progress.resume(initial_epoch)
        logs: Logs = {}
        for epoch in range(first, epochs):
            start = progress.begin_epoch(epoch)
            if not program.begin_epoch(epoch, start, epoch == first):
                break
            callbacks.on_epoch_begin(epoch)
            logs = program.train_epoch(epoch, start)
            freq = self.validation_freq
            if freq is not None and validates(epoch, freq):
                logs.update({"val_" + k: v for k, v in program.validate().items()})
            callbacks.on_epoch_end(epoch, logs)
            stop = program.stop()
            progress.epoch_done(epoch)
            if stop:
                break
        program.end()
        callbacks.on_train_end(logs=logs)
        return logs
