"""The ``checkpoint`` state file of a checkpoint directory: which checkpoints count, newest last.

TensorFlow keeps the same file (as a text protobuf); distrib writes JSON::

    {"latest": "ckpt-7", "all": ["ckpt-5", "ckpt-6", "ckpt-7"],
     "timestamps": [1.7e9, ...], "last_preserved_timestamp": 1.7e9}

Names are relative to the directory, so it can be moved.  The file is replaced
atomically (written under a hidden name, fsynced, renamed), and only after the
checkpoints it names are complete: a checkpoint counts once it is listed here.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_state(d, CheckpointState(latest="ckpt-1", all=["ckpt-1"], timestamps=[1.0]))
    >>> read_state(d).latest
    'ckpt-1'
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from distrib.files import atomic_path

__all__ = ["STATE_FILE", "CheckpointState", "read_state", "write_state"]

STATE_FILE = "checkpoint"


@dataclass
class CheckpointState:
    """What the state file records."""

    latest: str | None = None
    all: list[str] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    last_preserved_timestamp: float = 0.0


def read_state(directory: str) -> CheckpointState | None:
    """The state file of ``directory``, or None when there is none (or it is unreadable)."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        names = [str(n) for n in doc.get("all", [])]
        stamps = [float(t) for t in doc.get("timestamps", [])]
        if len(stamps) != len(names):
            stamps = [0.0] * len(names)
        latest = doc.get("latest")
        return CheckpointState(latest=str(latest) if latest is not None else None,
                               all=names, timestamps=stamps,
                               last_preserved_timestamp=float(
                                   doc.get("last_preserved_timestamp", 0.0)))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write_state(directory: str, state: CheckpointState) -> None:
    """Replace the state file of ``directory`` with ``state``, atomically."""
    doc = {"latest": state.latest, "all": state.all, "timestamps": state.timestamps,
           "last_preserved_timestamp": state.last_preserved_timestamp}
    with atomic_path(os.path.join(directory, STATE_FILE)) as tmp, \
            open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
