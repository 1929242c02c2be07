"""``ModelCheckpoint``: save the model or its weights during ``fit``.

``filepath`` may hold ``str.format`` fields filled from the epoch (1-based), the
batch (1-based, with an integer ``save_freq``) and the logs, e.g.
``"ckpt/weights.{epoch:02d}-{val_loss:.2f}.pt"``.

Every replica calls ``model.save`` / ``model.save_weights`` (a save may need all of
them); only the chief's file is kept.  A crash at any moment leaves the previous
checkpoint whole and no partial file under the final name: a model whose class sets
``saves_atomically = True`` (``distrib.Model`` does) writes that way itself and is given
the final path, so each save makes exactly one temporary file; any other model is given
a temporary file of distrib's one atomic writer (:func:`distrib.files.atomic_path`),
which the chief's save renames into place (files the model adds beside it, named
with a suffix, are moved to the final name plus that suffix by
:func:`distrib.files.commit_directory`); the other replicas' temporaries are removed.  Temporary
files that saves killed mid-write left behind are removed by the next save in the same
directory.

Example::

    model.fit(train, epochs=10, validation_data=test, callbacks=[
        ModelCheckpoint("ckpt/best.pt", monitor="val_accuracy", save_best_only=True,
                        save_weights_only=True)])
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np

from distrib.checkpoint.checkpoint import check_options
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.files import atomic_path, commit_directory
from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import print_msg, should_write, to_python, warn
from distrib.training.saving import remove_stale_temporaries, temporary_prefix

__all__ = ["ModelCheckpoint"]

_DIRECTORY_MESSAGE = ("Please specify a non-directory filepath for ModelCheckpoint. Filepath "
                      "used is an existing directory: ")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


class _Discard(Exception):
    """Leaves the atomic writer's block on a replica whose file is not kept."""


class ModelCheckpoint(Callback):
    """Saves the model or its weights at some frequency, as Keras's ``ModelCheckpoint``.

    Args:
        filepath: where to save; may hold ``{epoch}``, ``{batch}`` and log fields
            such as ``{val_loss:.2f}``.
        monitor: the log entry that decides the best model (``save_best_only``).
        verbose: 1 prints a line for every save decision.
        save_best_only: save only when ``monitor`` improved on the best so far.
        save_weights_only: call ``model.save_weights`` instead of ``model.save``.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (``max`` when ``monitor`` contains
            ``acc`` or starts with ``fmeasure``, else ``min``).
        save_freq: ``"epoch"`` or an integer number of training batches.
        options: accepted for compatibility with Keras; ignored.
        initial_value_threshold: the best value to beat before the first save
            (``save_best_only``).

    Example::

        ckpt = ModelCheckpoint("ckpt/model-{epoch:02d}.pt", save_weights_only=True)
        model.fit(train, epochs=3, callbacks=[ckpt])   # ckpt/model-01.pt ... -03.pt
    """

    def __init__(self, filepath: str | os.PathLike[str], monitor: str = "val_loss",
                 verbose: int = 0, save_best_only: bool = False,
                 save_weights_only: bool = False, mode: str = "auto",
                 save_freq: str | int = "epoch", options: Any = None,
                 initial_value_threshold: float | None = None) -> None:
        super().__init__()
        if save_freq != "epoch" and (
                not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1):
            raise UsageError(explain(
                "ModelCheckpoint save_freq", save_freq,
                f'Unrecognized save_freq: {save_freq}. Expected save_freq are "epoch" or integer',
                "pass save_freq='epoch' or a positive number of training batches"))
        if not isinstance(filepath, (str, os.PathLike)):
            raise InvalidTypeError(explain("ModelCheckpoint filepath", filepath,
                                           "must be a path (a string or os.PathLike)",
                                           "pass e.g. filepath='ckpt/model-{epoch}.pt'"))
        self.filepath = checks.path("ModelCheckpoint filepath", filepath,
                                    "pass e.g. filepath='ckpt/model-{epoch}.pt'")
        checks.text("ModelCheckpoint monitor", monitor, "pass e.g. monitor='val_loss'")
        checks.flag("ModelCheckpoint save_best_only", save_best_only)
        check_options(options, "ModelCheckpoint")
        checks.flag("ModelCheckpoint save_weights_only", save_weights_only)
        checks.number("ModelCheckpoint initial_value_threshold", initial_value_threshold,
                      optional=True)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.save_freq = save_freq
        self.options = options
        self.epochs_since_last_save = 0
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = -1
        self._current_epoch = 0
        if mode not in ("auto", "min", "max"):
            warn(None, "ModelCheckpoint mode %s is unknown, fallback to auto mode.", mode)
            mode = "auto"
        maximize = mode == "max" or (
            mode == "auto" and ("acc" in monitor or monitor.startswith("fmeasure")))
        self.monitor_op: Callable[[Any, Any], Any] = np.greater if maximize else np.less
        self.best: float = initial_value_threshold if initial_value_threshold is not None \
            else (-np.inf if maximize else np.inf)

    def get_state(self) -> dict[str, Any]:
        """The best value so far and the save-frequency counters."""
        return {"best": self.best, "epochs_since_last_save": self.epochs_since_last_save,
                "batches_seen": self._batches_seen_since_last_saving,
                "last_batch_seen": self._last_batch_seen}

    def set_state(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.epochs_since_last_save = int(state["epochs_since_last_save"])
        self._batches_seen_since_last_saving = int(state["batches_seen"])
        self._last_batch_seen = int(state["last_batch_seen"])

    def _implements_train_batch_hooks(self) -> bool:
        return self.save_freq != "epoch"  # batch hooks only when saving every N batches

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        self._current_epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        if self._should_save_on_batch(batch):
            self._save_model(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        self.epochs_since_last_save += 1
        if self.save_freq == "epoch":
            self._save_model(epoch, None, logs)

    def _should_save_on_batch(self, batch: int) -> bool:
        if self.save_freq == "epoch":
            return False
        if batch <= self._last_batch_seen:  # a new epoch
            add_batches = batch + 1
        else:
            add_batches = batch - self._last_batch_seen
        self._batches_seen_since_last_saving += add_batches
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= int(self.save_freq):
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _save_model(self, epoch: int, batch: int | None, logs: Logs | None) -> None:
        logs = {k: to_python(v) for k, v in (logs or {}).items()}
        self.epochs_since_last_save = 0
        filepath = self._get_file_path(epoch, batch, logs)
        if not self.save_best_only:
            if self.verbose > 0:
                print_msg(self.model, f"\nEpoch {epoch + 1}: saving model to {filepath}")
            self._save_handler(filepath)
            return
        current = logs.get(self.monitor)
        if current is None:
            warn(self.model, "Can save best model only with %s available, skipping.",
                 self.monitor)
        elif self.monitor_op(current, self.best):
            if self.verbose > 0:
                print_msg(self.model, f"\nEpoch {epoch + 1}: {self.monitor} improved from "
                          f"{self.best:.5f} to {current:.5f}, saving model to {filepath}")
            self.best = current
            self._save_handler(filepath)
        elif self.verbose > 0:
            print_msg(self.model, f"\nEpoch {epoch + 1}: {self.monitor} did not improve "
                      f"from {self.best:.5f}")

    def _get_file_path(self, epoch: int, batch: int | None, logs: Logs) -> str:
        """``filepath`` with its fields filled in (epoch and batch 1-based)."""
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            available = ", ".join(["epoch", "batch", *logs]) if batch is not None \
                else ", ".join(["epoch", *logs])
            raise KeyError(
                f'Failed to format this callback filepath: "{self.filepath}". Reason: {e}. '
                f"Fix: use only fields from this run's logs ({available}).") from e

    def _save_handler(self, filepath: str) -> None:
        """Saves atomically: directly for atomic models, else via a renamed temporary."""
        directory, base = os.path.split(filepath)
        chief = should_write(self.model)
        if directory:
            os.makedirs(directory, exist_ok=True)
        save = self.model.save_weights if self.save_weights_only else self.model.save
        if getattr(self.model, "saves_atomically", False):
            try:
                save(filepath)
            except IsADirectoryError as e:
                raise OSError(_DIRECTORY_MESSAGE + filepath) from e
            return
        remove_stale_temporaries(directory or ".")
        tmp = ""
        try:
            with atomic_path(filepath, prefix=temporary_prefix()) as tmp:
                save(tmp)
                extras = self._written(directory, os.path.basename(tmp))
                if not chief:
                    raise _Discard
                for written in extras:  # what the model added beside the file (suffixes)
                    commit_directory(os.path.join(directory, written),
                                     filepath + written[len(os.path.basename(tmp)):])
        except _Discard:
            self._cleanup(directory, os.path.basename(tmp))
        except IsADirectoryError as e:
            self._cleanup(directory, os.path.basename(tmp))
            raise OSError(_DIRECTORY_MESSAGE + filepath) from e
        except BaseException:
            if tmp:
                self._cleanup(directory, os.path.basename(tmp))
            raise

    @staticmethod
    def _written(directory: str, tmp_base: str) -> list[str]:
        """Names the save added beside the temporary file: the temporary name plus a suffix."""
        try:
            names = os.listdir(directory or ".")
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.startswith(tmp_base + "."))

    def _cleanup(self, directory: str, tmp_base: str) -> None:
        for name in self._written(directory, tmp_base):
            _remove(os.path.join(directory, name))
