"""``distrib.train``: the checkpoint names of ``tf.train``.

Example::

    checkpoint = distrib.train.Checkpoint(model=net, optimizer=opt)
    checkpoint.restore(distrib.train.latest_checkpoint("runs/ckpt"))
"""

from distrib.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointOptions,
    RNGState,
    latest_checkpoint,
)

__all__ = ["Checkpoint", "CheckpointManager", "CheckpointOptions", "RNGState",
           "latest_checkpoint"]
