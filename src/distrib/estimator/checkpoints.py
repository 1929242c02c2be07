"""The checkpoints of a model directory: ``model.ckpt-<global step>`` and the ``checkpoint`` file.

An Estimator's objects (its root modules, optimizers, LR schedulers) and the global
step are saved through :class:`distrib.Checkpoint` and :class:`distrib.CheckpointManager`:
each checkpoint is an atomic ``torch.distributed.checkpoint`` directory named by the
global step, listed in the directory's ``checkpoint`` state file once complete, and
the newest ``keep_checkpoint_max`` are kept.  Every replica takes part in a save (each
writes its share); the chief commits it.

Example::

    checkpoints = ModelCheckpoints("runs/est", config, strategy)
    checkpoints.track({"sequential": net, "sgd": optimizer})
    checkpoints.save(100)              # runs/est/model.ckpt-100
    checkpoints.latest()               # '.../runs/est/model.ckpt-100'
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import torch

from distrib.checkpoint import Checkpoint, CheckpointManager, latest_checkpoint
from distrib.checkpoint.storage import read_directory, read_tensor_metadata
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import UsageError, explain

__all__ = ["ModelCheckpoints", "BASENAME", "step_of", "variable_names", "variable_value"]

BASENAME = "model.ckpt"
_INTERNAL = ("__distrib__/", "__replica__/")




def step_of(path: str) -> int | None:
    """The global step in a checkpoint's name (``model.ckpt-42`` -> 42), or None.

    Example:
        >>> step_of("/runs/est/model.ckpt-42")
        42
    """
    match = re.search(r"-(\d+)$", os.path.basename(os.fspath(path)))
    return int(match.group(1)) if match else None


def _names(path: str) -> dict[str, str]:
    """Variable name (``sequential/0/weight``) -> tensor key in the checkpoint."""
    keys = read_tensor_metadata(path)
    return {key.replace(".", "/"): key for key in keys if not key.startswith(_INTERNAL)}


def variable_names(path: str) -> list[str]:
    """The names of the variables saved in the checkpoint at ``path``, sorted."""
    return sorted(_names(path))


def variable_value(path: str, name: str) -> np.ndarray:
    """The value of variable ``name`` in the checkpoint at ``path`` (a numpy array)."""
    names = _names(path)
    if name not in names:
        raise UsageError(explain("name", name, f"is not a variable of {path}",
                                 f"use one of get_variable_names(): {sorted(names)[:12]}"))
    key = names[name]
    return read_directory(path, want=lambda k: k == key)[key].numpy()


class ModelCheckpoints:
    """Saves and restores an Estimator's objects in its model directory.

    Args:
        model_dir: the Estimator's model directory.
        keep_checkpoint_max: checkpoints to keep (0 or None: all).
        keep_checkpoint_every_n_hours: also keep one per this many hours.
        strategy: the strategy the objects were created under.
    """

    def __init__(self, model_dir: str, keep_checkpoint_max: int | None,
                 keep_checkpoint_every_n_hours: float, strategy: Any) -> None:
        self.model_dir = os.path.abspath(model_dir)
        self._max = keep_checkpoint_max or None
        self._hours = keep_checkpoint_every_n_hours
        self._strategy = strategy
        self.global_step = torch.zeros((), dtype=torch.int64)
        self._checkpoint: Checkpoint | None = None
        self._managers: dict[tuple[str, str], CheckpointManager] = {}
        self._tracked: dict[str, int] = {}
        self._saved: dict[tuple[str, str], int] = {}
        #: the checkpoint whose values the objects hold (None: unknown or none)
        self.loaded: str | None = None

    def track(self, objects: dict[str, Any]) -> None:
        """Save ``objects`` (by name) and the global step from now on."""
        ids = {name: id(obj) for name, obj in objects.items()}
        if ids == self._tracked and self._checkpoint is not None:
            return
        with self._strategy.scope():
            self._checkpoint = Checkpoint(**objects, global_step=self.global_step)
        self._tracked = ids
        self._managers = {}
        self.loaded = None

    def _manager(self, directory: str, basename: str) -> CheckpointManager:
        key = (os.path.abspath(directory), basename)
        if key not in self._managers:
            assert self._checkpoint is not None
            own = key[0] == self.model_dir
            self._managers[key] = CheckpointManager(
                self._checkpoint, key[0], max_to_keep=self._max if own else 5,
                keep_checkpoint_every_n_hours=self._hours if own else None,
                checkpoint_name=basename)
        return self._managers[key]

    def has(self, step: int, directory: str | None = None, basename: str = BASENAME) -> bool:
        """Whether the objects are saved as ``step`` there already (the same on every replica).

        True when this run saved that step there, or (in the model directory) restored it
        and has not changed the objects since.
        """
        key = (os.path.abspath(directory or self.model_dir), basename)
        if key == (self.model_dir, BASENAME) and self.loaded is not None:
            return step_of(self.loaded) == step
        return self._saved.get(key) == step

    def save(self, step: int, directory: str | None = None, basename: str = BASENAME) -> str:
        """Save every tracked object as ``<directory>/<basename>-<step>`` (every replica calls)."""
        self.global_step.fill_(int(step))
        path = self._manager(directory or self.model_dir, basename).save(
            checkpoint_number=int(step))
        assert path is not None
        self._saved[(os.path.abspath(directory or self.model_dir), basename)] = int(step)
        if directory is None or os.path.abspath(directory) == self.model_dir:
            self.loaded = path
        return path

    def latest(self) -> str | None:
        """The newest complete checkpoint of the model directory, as the chief sees it."""
        group: ReplicaGroupInfo = self._strategy.extended.replica_group
        local = latest_checkpoint(self.model_dir) if group.is_chief else None
        return group.chief_text(local)

    def restore(self, path: str) -> int:
        """Load ``path`` into the tracked objects (every replica calls); returns its global step."""
        assert self._checkpoint is not None
        self._checkpoint.restore(path).expect_partial()
        self.loaded = path
        return int(self.global_step.item())
