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

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.distribute.group import ReplicaGroupInfo
from distrib.input.digest import check_same_data

__all__ = ["StepAgreement", "Agreement", "Agreed", "local_rows"]


def local_rows(batch: Any) -> int:
    """The rows of this replica's batch: dim 0 of its first tensor (0 without one)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    for leaf in nest.flatten(batch):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() else 1
    return 0


@dataclass(frozen=True)
class Agreed:
    """What the replicas agreed on at one exchange."""

    next_rows: int           # examples of the next step over every replica
    all_have_data: bool      # every replica has a non-empty next batch
    loss: float | None       # the step's loss over every replica's examples
    time: float              # the chief's clock
    stops: int               # replicas that asked to stop
    errors: int              # replicas that failed


class Agreement:
    """The Estimator's per-step agreement: one all-reduce of a few float64 numbers per
    exchange (no collective for one replica) — the next step's rows, whether every replica
    has data, the step's loss, the chief's clock, stop requests, failures, and every
    replica's fingerprint of the next global batch where the input takes one."""

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self._group = group
        self._replicas = group.num_replicas_in_sync

    def exchange(self, next_rows: int = 0, loss: float | None = None, rows: int = 0,
                 stop: bool = False, error: bool = False, digest: int | None = None
                 ) -> Agreed:
        """Exchange this replica's numbers; every replica must call it at the same point.

        ``digest``: the input's fingerprint of the next global batch (None when the input
        takes none at this step); replicas whose fingerprints differ raise ``DataError``.
        """
        now = time.time() if self._group.is_chief else 0.0
        weighted = 0.0 if loss is None or rows == 0 else loss * rows
        values = [float(next_rows), 1.0 if next_rows > 0 else 0.0, weighted,
                  float(rows) if loss is not None else 0.0, now, float(stop), float(error)]
        if self._replicas > 1:
            slots = [0.0] * self._replicas  # exact in float64: 52 bits of the fingerprint
            slots[self._group.replica_id] = -1.0 if digest is None else float(digest >> 10)
            reduced = self._group.all_reduce_sum(torch.tensor(values + slots,
                                                              dtype=torch.float64))
            values = [float(v) for v in reduced.tolist()]
            check_same_data([int(v) << 10 for v in values[7:]],
                                self._group.local_replicas)
        total_loss = values[2] / values[3] if values[3] > 0 else (
            float("nan") if loss is not None and np.isnan(loss) else None)
        return Agreed(next_rows=int(values[0]), all_have_data=values[1] == self._replicas,
                      loss=total_loss, time=values[4], stops=int(values[5]),
                      errors=int(values[6]))


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
        check_same_data([d for _, d in every], self.group.local_replicas)
        return sum(r for r, _ in every)
