"""The per-step agreement: the step's global rows and, on sampled steps, the data.

Where the rows of every step are known in advance (in-memory arrays, checked equal on
every replica before training) nothing travels.  Otherwise the replicas learn the
step's global rows with one small all-reduce, the one a loss scaled for the global
batch needs anyway; on the steps where the input fingerprints the global batch
(:mod:`distrib.input.digest`: the first of each epoch and a few sampled after it),
the fingerprints travel in that same all-reduce, and replicas that read different
data raise :class:`~distrib.errors.DataError` naming them, on every replica.

Example::

    agreement = StepAgreement(group)
    rows = agreement.rows(batch, None, handler.global_digest())   # all-reduced rows
"""

from __future__ import annotations

from typing import Any

import torch

from distrib import nest
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DataError, explain

__all__ = ["StepAgreement", "local_rows"]


def local_rows(batch: Any) -> int:
    """The rows of this replica's batch: dim 0 of its first tensor (0 without one)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    for leaf in nest.flatten(batch):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() else 1
    return 0


class StepAgreement:
    """The replicas' agreement on each step (see the module docstring).

    Args:
        group: the replica group.
    """

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self.group = group
        self.replicas = int(group.num_replicas_in_sync)

    def rows(self, batch: Any, known: int | None, digest: int | None) -> int | None:
        """The step's global rows: ``known`` when given; else, on a fingerprinted step
        (``digest`` not None), all-reduced with the fingerprints and checked; else None
        (the replica context all-reduces them if the step needs them)."""
        if known is not None or digest is None or self.replicas == 1:
            return known
        every = self.group.each([local_rows(batch), digest])
        differ = [r for r, (_, d) in enumerate(every) if d != every[0][1]]
        if differ:
            raise DataError(explain(
                "input data", f"replica(s) {differ} read a different global batch than "
                "replica 0", "replicas that split one dataset must build it from the same "
                "data (each replica process builds the pipeline itself; here the batch "
                "its replicas split differs: data drawn at random per process, a file "
                "that changed, a different argument)", "build the data identically in "
                "every process (seed numpy before drawing, e.g. np.random.seed(0), and "
                "draw the same values everywhere), or give each replica its own data "
                "with strategy.distribute_datasets_from_function"))
        return sum(r for r, _ in every)
