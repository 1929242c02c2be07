"""``BackupAndRestore``: resume an interrupted ``fit`` exactly where it stopped.

Keras' callback, made exact: a backup holds the model (weights, optimizer and
loss-scale state, metric accumulators, step counter), every callback's state
(``EarlyStopping``'s wait and best, ``ReduceLROnPlateau``, ``LearningRateScheduler``,
``History``, ``CSVLogger``'s file position...), the data position and the random
generators.  When ``fit`` starts again with the same command, it restores the
backup and continues at the same step of the same epoch, with the same batches:
the final weights and history are the same as those of an uninterrupted run.

Backups are :class:`~distrib.Checkpoint` directories in ``backup_dir``
(``ckpt-<n>``, only the newest kept), written by every replica, overlapped with
training (the state is copied, then written in a background thread), and counted
only once complete — a crash during a backup leaves the previous one.

Example::

    model.fit(train, epochs=10, callbacks=[
        distrib.callbacks.BackupAndRestore("runs/backup", save_freq=100)])
    # killed at epoch 4, step 37; the same command continues from the last backup
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from distrib.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointOptions,
    PreemptionWatcher,
    TerminationConfig,
)
from distrib.checkpoint.checkpoint import check_options
from distrib.checkpoint.statefile import STATE_FILE
from distrib.checkpoint.storage import remove_directory
from distrib.errors import UsageError, explain
from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import should_write

__all__ = ["BackupAndRestore"]


class BackupAndRestore(Callback):
    """Backs up training to ``backup_dir`` and resumes from it, exactly (Keras' callback).

    Args:
        backup_dir: where backups go; one directory per run, not shared with other
            callbacks or runs.  Checked (created, writable) when ``fit`` starts.
        save_freq: ``"epoch"`` (back up at the end of every epoch) or a number of
            training steps between backups; False for none (with
            ``save_before_preemption``).
        delete_checkpoint: delete the backups when ``fit`` finishes (so the next
            ``fit`` starts afresh).
        save_before_preemption: when any worker receives SIGTERM, every worker backs
            up at the same step and exits with status 42 (see
            ``distrib.PreemptionCheckpointHandler``).
        options: :class:`~distrib.train.CheckpointOptions`; by default backups are
            written asynchronously (overlapped with training).

    Example::

        callbacks = [distrib.callbacks.BackupAndRestore("runs/backup", save_freq="epoch")]
        model.fit(train, epochs=10, callbacks=callbacks)
    """

    def __init__(self, backup_dir: str | os.PathLike[str], save_freq: str | int = "epoch",
                 delete_checkpoint: bool = True, save_before_preemption: bool = False,
                 options: CheckpointOptions | None = None) -> None:
        super().__init__()
        if not save_freq and not save_before_preemption:
            raise UsageError(explain("save_freq", save_freq, "Either `save_freq` or "
                                     "`save_before_preemption` must be set",
                                     "pass save_freq='epoch' or a number of steps"))
        if save_freq and save_freq != "epoch" and (
                isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise UsageError(explain("save_freq", save_freq, 'Unrecognized save_freq: '
                                     f'{save_freq}. Expected save_freq are "epoch" or integer',
                                     "pass 'epoch' or a positive number of steps"))
        self.backup_dir = os.path.abspath(checks.path(
            "BackupAndRestore backup_dir", backup_dir, "pass a folder of its own, e.g. "
            "backup_dir='runs/backup'"))
        checks.flag("BackupAndRestore delete_checkpoint", delete_checkpoint)
        checks.flag("BackupAndRestore save_before_preemption", save_before_preemption)
        check_options(options, "BackupAndRestore")
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.save_before_preemption = save_before_preemption
        self.options = options if options is not None else CheckpointOptions(enable_async=True)
        self._manager: CheckpointManager | None = None
        self._state: Any = None
        self._watcher: PreemptionWatcher | None = None
        self._config = TerminationConfig()
        self._last_saved_step = 0

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        return 0  # backups read no logs

    def get_state(self) -> dict[str, Any]:
        """The train step of the last backup (``save_freq`` counts from there)."""
        return {"last_saved_step": self._last_saved_step}

    def set_state(self, state: dict[str, Any]) -> None:
        self._last_saved_step = int(state["last_saved_step"])

    def resume_training(self, training_state: Any) -> tuple[int, int] | None:
        """Restore the newest backup into ``training_state``; the ``(epoch, step)`` to resume at."""
        self._state = training_state
        self._last_saved_step = 0
        checkpoint = Checkpoint(root=training_state)
        self._manager = CheckpointManager(checkpoint, self.backup_dir, max_to_keep=1)
        training_state.add_listener(self._on_progress)
        if self.save_before_preemption:
            group = self.model.distribute_strategy.extended.replica_group
            self._watcher = PreemptionWatcher(group, self._config)
        if self._manager.restore_or_initialize() is None:
            return None
        return training_state.epoch, training_state.step

    def _save(self, options: CheckpointOptions | None) -> None:
        assert self._manager is not None
        self._last_saved_step = int(self.model._train_counter)
        self._manager.save(options=options)

    def _on_progress(self, event: str) -> None:
        if event == "batch":
            if self._watcher is not None and self._watcher.agreed():
                self._save(None)
                self._close()
                self._config.exit_fn()
            if isinstance(self.save_freq, int) and not isinstance(self.save_freq, bool) and \
                    self.model._train_counter - self._last_saved_step >= self.save_freq:
                self._save(self.options)
        elif event == "epoch" and self.save_freq == "epoch":
            self._save(self.options)

    def _close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def on_train_end(self, logs: Logs | None = None) -> None:
        self._close()
        if self._manager is None:
            return
        self._manager.sync()
        if self.delete_checkpoint and should_write(self.model):
            for path in self._manager.checkpoints:
                remove_directory(path)
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.backup_dir, STATE_FILE))
            with contextlib.suppress(OSError):
                os.rmdir(self.backup_dir)
        self._manager = None
