"""Values each replica updates on its own and reads as the sum over replicas (TF's ON_READ).

TensorFlow keeps a metric's state (totals, counts) in *SyncOnRead* variables: each
replica adds to its own copy inside ``strategy.run``, and a read in cross-replica
context returns the SUM of the copies.  distrib runs one process per replica, so a
read that communicates would need every replica to read at the same moment — and a
result printed under ``if chief:`` would wait forever for the others.  Instead the
copies are summed where every replica already is at the same point: when
``strategy.run`` returns, one all-reduce sums the local states of every registered
value of that strategy, and each keeps the global sum.  Reading afterwards
communicates nothing, so it is safe anywhere — on the chief alone included.

A value registers with :meth:`SyncOnReadGroup.register` and implements the
:class:`SyncOnReadValue` protocol (``distrib.metrics.Metric`` does).  Every replica
must register the same values in the same order (create them in the same order,
as an SPMD program does).

Example (two replicas; each adds its replica id to a value ``v`` in ``strategy.run``)::

    strategy.run(lambda: v.add(replica_id))
    # both replicas now read v's global sum, 0 + 1 == 1, with no further communication
"""

from __future__ import annotations

import weakref
from typing import Protocol

import torch

from distrib.distribute.group import ReplicaGroupInfo

__all__ = ["SyncOnReadValue", "SyncOnReadGroup"]


class SyncOnReadValue(Protocol):
    """What a value summed across replicas on read provides."""

    def local_state(self) -> torch.Tensor:
        """This replica's state as one flat float64 CPU tensor (same size on every replica)."""
        ...

    def set_global_state(self, total: torch.Tensor) -> None:
        """Keep ``total``, the SUM over replicas of :meth:`local_state`."""
        ...


class SyncOnReadGroup:
    """The SyncOnRead values of one strategy, summed across its replicas in one collective.

    Args:
        group: the replica group (a group of one makes :meth:`synchronize` local).
    """

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self._group = group
        self._values: list[weakref.ref[SyncOnReadValue]] = []

    def register(self, value: SyncOnReadValue) -> None:
        """Sum ``value`` across replicas from now on, at every :meth:`synchronize`."""
        self._values.append(weakref.ref(value))

    def __len__(self) -> int:
        return sum(1 for ref in self._values if ref() is not None)

    def synchronize(self) -> None:
        """ONE all-reduce of every live value's state; each keeps the global sum.

        Every replica must call it at the same point (``strategy.run`` does, on return).
        """
        if not self._values:  # nothing registered (one replica, or no metrics): no work
            return
        live = [v for v in (ref() for ref in self._values) if v is not None]
        self._values = [weakref.ref(v) for v in live]
        if not live:
            return
        parts = [v.local_state() for v in live]
        flat = torch.cat(parts) if len(parts) > 1 else parts[0]
        if self._group.num_replicas_in_sync > 1:
            flat = self._group.all_reduce_sum(flat)
        pos = 0
        for value, part in zip(live, parts):
            value.set_global_state(flat[pos:pos + part.numel()])
            pos += part.numel()
