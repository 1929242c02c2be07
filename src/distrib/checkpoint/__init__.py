"""Atomic checkpoints, exact resume and preemption handling (layer 5).

* :class:`Checkpoint` — ``tf.train.Checkpoint``: tracks modules, optimizers,
  ``distrib.Model``, dataset iterators, LR schedulers, a step counter and
  :class:`RNGState`; ``save``/``write``/``restore``/``read``.
* :class:`CheckpointManager` and :func:`latest_checkpoint` — ``tf.train``'s.
* :class:`PreemptionCheckpointHandler` and :class:`TerminationConfig` — save at an
  agreed step when a worker receives SIGTERM, then exit with status 42.

Checkpoints are ``torch.distributed.checkpoint`` directories that appear under their
name only once every replica has written its part; reading one never runs code
from it.  See docs/fault_tolerance.md.

Example::

    checkpoint = distrib.Checkpoint(model=net, optimizer=opt, rng=RNGState())
    manager = distrib.CheckpointManager(checkpoint, "runs/ckpt", max_to_keep=3)
    manager.restore_or_initialize()
"""

from distrib.checkpoint.checkpoint import Checkpoint, CheckpointOptions
from distrib.checkpoint.manager import CheckpointManager, latest_checkpoint
from distrib.checkpoint.preemption import (
    PREEMPTION_EXIT_CODE,
    PreemptionCheckpointHandler,
    PreemptionWatcher,
    TerminationConfig,
)
from distrib.checkpoint.rng import RNGState
from distrib.checkpoint.status import LoadStatus

__all__ = [
    "Checkpoint", "CheckpointOptions", "CheckpointManager", "latest_checkpoint",
    "PreemptionCheckpointHandler", "PreemptionWatcher", "TerminationConfig",
    "PREEMPTION_EXIT_CODE", "RNGState", "LoadStatus",
]
