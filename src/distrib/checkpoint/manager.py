"""``distrib.CheckpointManager`` and ``distrib.train.latest_checkpoint`` (``tf.train``'s).

The manager numbers checkpoints ``<directory>/<checkpoint_name>-<n>``, keeps the
newest ``max_to_keep`` (and one every ``keep_checkpoint_every_n_hours``), and
records them in the directory's ``checkpoint`` state file once they are complete.
:meth:`CheckpointManager.restore_or_initialize` restores the newest checkpoint that
can be read: a truncated or corrupt newest one is skipped with a warning naming it.

Example::

    manager = distrib.CheckpointManager(checkpoint, "runs/ckpt", max_to_keep=3)
    manager.restore_or_initialize()          # None on the first run
    for step in ...:
        ...
        manager.save()                       # runs/ckpt/ckpt-1, ckpt-2, ...
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import torch

from distrib.checkpoint.checkpoint import Checkpoint, CheckpointOptions
from distrib.checkpoint.statefile import STATE_FILE, CheckpointState, read_state, write_state
from distrib.checkpoint.storage import check_writable, remove_directory
from distrib.errors import CheckpointError, CheckpointMismatchError, UsageError, explain, warn

#: The clock of checkpoint timestamps (seconds since the epoch, as TF records them).
_clock = time.time

__all__ = ["CheckpointManager", "latest_checkpoint", "record_checkpoint"]

_record_lock = threading.Lock()


def _complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, ".metadata"))


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str],
                      latest_filename: str | None = None) -> str | None:
    """The newest complete checkpoint recorded in ``checkpoint_dir``, or None.

    Example::

        path = distrib.train.latest_checkpoint("runs/ckpt")   # ".../runs/ckpt/ckpt-7"
        checkpoint.restore(path)
    """
    if not isinstance(checkpoint_dir, (str, os.PathLike)):
        raise UsageError(explain("latest_checkpoint checkpoint_dir", checkpoint_dir,
                                 "must be a path (str or os.PathLike)",
                                 "pass the directory given to save, e.g. 'runs/ckpt'"))
    directory = os.path.abspath(os.fspath(checkpoint_dir))
    state = read_state(directory)
    if state is None:
        return None
    for name in reversed(state.all or ([state.latest] if state.latest else [])):
        path = os.path.join(directory, name)
        if _complete(path):
            return path
    return None


def record_checkpoint(path: str) -> None:
    """Add a complete checkpoint to its directory's state file (``Checkpoint.save`` does)."""
    directory, name = os.path.split(path)
    with _record_lock:
        state = read_state(directory) or CheckpointState()
        if name in state.all:
            i = state.all.index(name)
            del state.all[i], state.timestamps[i]
        state.all.append(name)
        state.timestamps.append(_clock())
        state.latest = name
        write_state(directory, state)


def _as_int(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.item())
    return int(value)


def _integer(value: object) -> bool:
    """Whether ``value`` is an int, a NumPy integer or a one-element integer tensor."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_floating_point() \
            and not value.is_complex() and value.dtype != torch.bool
    return not isinstance(value, bool) and hasattr(value, "__index__")


def _check_manager_arguments(directory: object, hours: object, name: object,
                             interval: object, init_fn: object) -> None:
    """Refuse the arguments of ``CheckpointManager`` that would misbehave silently."""
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise UsageError(explain("CheckpointManager directory", directory,
                                 "must be a non-empty path (str or os.PathLike)",
                                 "pass a directory of its own, e.g. 'runs/ckpt'"))
    if hours is not None and (isinstance(hours, bool) or not isinstance(hours, (int, float))
                              or not 0 < hours < float("inf")):
        raise UsageError(explain("keep_checkpoint_every_n_hours", hours,
                                 "must be a positive number of hours or None",
                                 "pass e.g. 1.0 to keep one checkpoint per hour, or None"))
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name \
            or "\\" in name or os.sep in name or "\0" in name:
        raise UsageError(explain("checkpoint_name", name, "must be a plain file name (no "
                                 "directory part), as checkpoints go inside `directory`",
                                 "pass a name such as 'ckpt', and put the folder in "
                                 "`directory`"))
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)
                                 or interval < 1):
        raise UsageError(explain("checkpoint_interval", interval,
                                 "must be a positive int (steps between checkpoints) or None",
                                 "pass e.g. 100, or None to save at every save()"))
    if init_fn is not None and not callable(init_fn):
        raise UsageError(explain("init_fn", init_fn, "must be callable or None",
                                 "pass a function that initialises the objects"))


def _scan(directory: str, name: str) -> CheckpointState:
    """The complete ``<name>-<n>`` checkpoints of ``directory``, by number (no state file)."""
    numbered: list[tuple[int, str]] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(directory):
            stem, _, number = entry.rpartition("-")
            if stem == name and number.isdigit() and _complete(os.path.join(directory, entry)):
                numbered.append((int(number), entry))
    names = [entry for _, entry in sorted(numbered)]
    return CheckpointState(latest=names[-1] if names else None, all=names,
                           timestamps=[0.0] * len(names))


class CheckpointManager:
    """Saves numbered checkpoints into a directory and keeps the newest few.

    Args:
        checkpoint: the :class:`~distrib.Checkpoint` to save and restore.
        directory: where checkpoints go (created if missing; must be writable —
            checked now, on every replica, so a bad directory fails before training).
        max_to_keep: how many checkpoints to keep (None: all).
        keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours.
        checkpoint_name: the name prefix (``ckpt`` gives ``ckpt-1``, ``ckpt-2``...).
        step_counter: a tensor (or int-like) counting steps, for ``checkpoint_interval``.
        checkpoint_interval: save only when ``step_counter`` advanced this many steps
            since the last checkpoint.
        init_fn: called by :meth:`restore_or_initialize` when there is no checkpoint.

    Every replica must create the manager and call :meth:`save` and
    :meth:`restore_or_initialize` at the same points.  The directory must be one that
    every worker sees (a shared filesystem), as with ``torch.distributed.checkpoint``.

    Example::

        manager = distrib.CheckpointManager(checkpoint, "runs/ckpt", max_to_keep=3,
                                            step_counter=step, checkpoint_interval=100)
        manager.save()      # only every 100 steps of `step`
    """

    def __init__(self, checkpoint: Checkpoint, directory: str | os.PathLike[str],
                 max_to_keep: int | None, keep_checkpoint_every_n_hours: float | None = None,
                 checkpoint_name: str = "ckpt", step_counter: Any = None,
                 checkpoint_interval: int | None = None, init_fn: Any = None) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise UsageError(explain("checkpoint", type(checkpoint).__name__,
                                     "must be a distrib.Checkpoint",
                                     "pass distrib.Checkpoint(model=..., optimizer=...)"))
        if max_to_keep is not None and (isinstance(max_to_keep, bool)
                                        or not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise UsageError(explain("max_to_keep", max_to_keep, "must be a positive int or "
                                     "None (keep every checkpoint)", "pass e.g. 5"))
        _check_manager_arguments(directory, keep_checkpoint_every_n_hours, checkpoint_name,
                                 checkpoint_interval, init_fn)
        if checkpoint_interval is not None and step_counter is None:
            raise UsageError(explain("step_counter", None, "`step_counter` should be passed "
                                     "if `checkpoint_interval` is not None",
                                     "pass step_counter=<a step tensor>"))
        self._checkpoint = checkpoint
        self._directory = os.path.abspath(os.fspath(directory))
        self._max_to_keep = max_to_keep
        self._keep_hours = keep_checkpoint_every_n_hours
        self._name = checkpoint_name
        self._step_counter = step_counter
        self._interval = checkpoint_interval
        self._init_fn = init_fn
        self._last_step: int | None = None
        checkpoint.sync()  # a write still in flight in this process may change the directory
        self._check_directory()
        state = read_state(self._directory)
        if state is None and os.path.exists(os.path.join(self._directory, STATE_FILE)):
            state = _scan(self._directory, checkpoint_name)
            if self._checkpoint._extended().replica_group.replica_id == 0:
                warn(
                    f"The checkpoint state file {os.path.join(self._directory, STATE_FILE)} "
                    f"cannot be read (not the JSON distrib writes); using the complete "
                    f"checkpoints found in the directory instead: {state.all or 'none'}. "
                    "It is rewritten at the next save.")
        state = state or CheckpointState()
        self._kept: dict[str, float] = dict(zip(state.all, state.timestamps))
        self._last_preserved = state.last_preserved_timestamp or _clock()

    def _check_directory(self) -> None:
        group = self._checkpoint._extended().replica_group
        problem = check_writable(self._directory) if group.replica_id == 0 else None
        if group.count(problem is not None):
            raise CheckpointError(explain(
                "checkpoint directory", self._directory,
                f"is not writable{f' ({problem})' if problem else ' (see the chief)'}",
                "choose a directory this job can write, or fix its permissions"))

    # ---------------------------------------------------------------- views
    @property
    def directory(self) -> str:
        """The checkpoint directory (absolute)."""
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        """The managed checkpoint."""
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        """Steps between two checkpoints (None: every :meth:`save` writes)."""
        return self._interval

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints, oldest first."""
        return [os.path.join(self._directory, n) for n in self._kept]

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint (None when there is none)."""
        names = list(self._kept)
        return os.path.join(self._directory, names[-1]) if names else None

    # ----------------------------------------------------------------- save
    def _due(self, check_interval: bool) -> bool:
        if self._interval is None:
            return True
        step = _as_int(self._step_counter)
        if self._last_step is not None:
            if step == self._last_step:
                return False
            if check_interval and step < self._last_step + self._interval:
                return False
        self._last_step = step
        return True

    def _sweep(self) -> list[str]:
        """The names to delete so that ``max_to_keep`` hold (preserving hourly ones)."""
        doomed: list[str] = []
        if self._max_to_keep is None:
            return doomed
        while len(self._kept) > self._max_to_keep:
            name = next(iter(self._kept))
            stamp = self._kept.pop(name)
            if self._keep_hours is not None and \
                    stamp - self._last_preserved >= self._keep_hours * 3600.0:
                self._last_preserved = stamp
                continue
            doomed.append(name)
        return doomed

    def _commit(self, kept: list[str], stamps: list[float], doomed: list[str],
                last_preserved: float) -> None:
        state = CheckpointState(latest=kept[-1], all=kept, timestamps=stamps,
                                last_preserved_timestamp=last_preserved)
        write_state(self._directory, state)
        for name in doomed:
            remove_directory(os.path.join(self._directory, name))

    def save(self, checkpoint_number: Any = None, check_interval: bool = True,
             options: CheckpointOptions | None = None) -> str | None:
        """Write a new checkpoint; returns its path (None when ``checkpoint_interval`` says not yet).

        Args:
            checkpoint_number: the number in the name (default: the checkpoint's
                ``save_counter`` after this save).
            check_interval: honour ``checkpoint_interval`` (False: save anyway).
            options: :class:`CheckpointOptions` (asynchronous saving).
        """
        if checkpoint_number is not None and not _integer(checkpoint_number):
            raise UsageError(explain("CheckpointManager.save checkpoint_number",
                                     checkpoint_number, "must be an int (or a one-element "
                                     "integer tensor) or None", "pass e.g. 7, or leave it out "
                                     "to number by save_counter"))
        if not self._due(check_interval):
            return None
        ckpt = self._checkpoint
        ckpt._save_counter += 1
        number = ckpt._save_counter if checkpoint_number is None else _as_int(checkpoint_number)
        name = f"{self._name}-{number}"
        self._kept.pop(name, None)
        self._kept[name] = _clock()
        doomed = self._sweep()
        kept, stamps, preserved = list(self._kept), list(self._kept.values()), \
            self._last_preserved
        path = os.path.join(self._directory, name)
        return ckpt._write(path, options,
                           lambda: self._commit(kept, stamps, doomed, preserved))

    def sync(self) -> None:
        """Wait for an asynchronous save to finish (raises its error)."""
        self._checkpoint.sync()

    # -------------------------------------------------------------- restore
    def restore_or_initialize(self) -> str | None:
        """Restore the newest readable checkpoint, or call ``init_fn``; returns the path or None.

        A checkpoint that some replica cannot read (truncated, corrupt, incomplete) is
        skipped with a warning naming it, and the one before it is tried.  A checkpoint
        that does not fit the tracked objects raises.
        """
        ckpt = self._checkpoint
        ckpt.sync()
        group = ckpt._extended().replica_group
        skipped: list[tuple[str, str]] = []
        for path in reversed(self.checkpoints):
            prepared, error = ckpt._prepare(path)
            mismatched = not isinstance(error, CheckpointError) and error is not None
            failed, refused = group.counts([error is not None, mismatched])
            if refused:
                raise error if mismatched and error is not None else CheckpointMismatchError(
                    f"Checkpoint {path} does not match the objects it is restored into "
                    f"on {refused} replica(s) (see their errors).")
            if failed == 0 and prepared is not None:
                for damaged, _ in skipped:
                    self._kept.pop(os.path.basename(damaged), None)
                ckpt._apply(prepared).expect_partial()
                if self._interval is not None:
                    self._last_step = _as_int(self._step_counter)
                return path
            reason = str(error) if error is not None else \
                f"{failed} replica(s) could not read it"
            skipped.append((path, reason))
            if group.replica_id == 0 and len(skipped) < len(self._kept):
                warn(f"Skipping checkpoint {path}: {reason}. Restoring the one "
                     "before it instead.")
        if skipped:
            # Starting over would train from step 0 and rotate the unreadable checkpoints
            # (perhaps readable elsewhere) out of the directory: progress would be lost.
            raise CheckpointError(
                f"{self._directory} holds {len(skipped)} checkpoint(s) and none can be "
                "restored:\n  " + "\n  ".join(f"{p}: {why}" for p, why in skipped)
                + "\nNothing was initialised, so nothing is overwritten. Fix or move the "
                "checkpoints named (or restore one explicitly with Checkpoint.restore), or "
                "pass an empty directory to start over.")
        if self._init_fn is not None:
            self._init_fn()
        return None
