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
from typing import Any, Protocol, cast

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

    The group holds its values weakly, so a metric the program drops is freed; but when a
    dropped value is freed depends on each process's garbage collector (a value in a
    reference cycle lives until a collection, and a chief that logs more collects at
    other moments).  So the collective's layout never depends on it: a value is held
    until its place is sized (:meth:`settle`, or its first :meth:`synchronize`); it keeps
    that place (a freed one adds zeros of its size) until it is freed on every replica,
    which the same all-reduce tells each replica (a count per value).

    Args:
        group: the replica group (a group of one makes :meth:`synchronize` local).
    """

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self._group = group
        # A place in the collective's layout per value: (the value itself, None) until
        # it is sized, then (a weak reference to it, its state's size).
        self._values: list[tuple[_Held, int | None]] = []

    def register(self, value: SyncOnReadValue) -> None:
        """Sum ``value`` across replicas from now on, at every :meth:`synchronize`.

        The group holds ``value`` until :meth:`settle` or its first synchronize sizes it.
        """
        self._values.append((value, None))

    def settle(self, value: SyncOnReadValue) -> None:
        """``value``'s state exists now: size its place and hold it weakly from here on
        (a metric calls this once, when it makes its state)."""
        for i in range(len(self._values) - 1, -1, -1):
            held, size = self._values[i]
            if size is None and held is value:
                self._values[i] = (weakref.ref(value), value.local_state().numel())
                return

    def __len__(self) -> int:
        return sum(1 for held, size in self._values if _value(held, size) is not None)

    def synchronize(self) -> None:
        """ONE all-reduce of every registered value's state; each live one keeps the
        global sum.

        Every replica must call it at the same point (``strategy.run`` does, on return).

        Example (one replica: the sums are the local states)::

            >>> from distrib.distribute.group import ReplicaGroupInfo
            >>> class Total:
            ...     def __init__(self): self.state, self.total = torch.ones(2), None
            ...     def local_state(self): return self.state
            ...     def set_global_state(self, total): self.total = total
            >>> group, value = SyncOnReadGroup(ReplicaGroupInfo.single()), Total()
            >>> group.register(value)
            >>> group.synchronize()
            >>> value.total.tolist()
            [1.0, 1.0]
        """
        if not self._values:  # nothing registered (one replica, or no metrics): no work
            return
        live = [_value(held, size) for held, size in self._values]
        parts = [value.local_state() if value is not None else
                 torch.zeros(size or 0, dtype=torch.float64)
                 for value, (_, size) in zip(live, self._values)]
        replicas = self._group.num_replicas_in_sync
        if replicas == 1:
            counts = [float(value is None) for value in live]
            flat = torch.cat(parts) if len(parts) > 1 else parts[0]
        else:
            freed = torch.tensor([float(value is None) for value in live],
                                 dtype=torch.float64)
            flat = self._group.all_reduce_sum(torch.cat([*parts, freed]))
            counts = flat[-len(live):].tolist()
        pos = 0
        for value, part in zip(live, parts):
            if value is not None:
                value.set_global_state(flat[pos:pos + part.numel()])
            pos += part.numel()
        # Freed on every replica: every replica drops its place at this same call.
        self._values = [(held if size is not None else weakref.ref(value), part.numel())
                        for (held, size), value, part, count
                        in zip(self._values, live, parts, counts) if count < replicas]


_Held = Any  # a value (until its place is sized) or a weak reference to it


def _value(held: _Held, size: int | None) -> SyncOnReadValue | None:
    """The value of a place: held itself until sized, then through its weak reference."""
    return cast("SyncOnReadValue | None", held if size is None else held())
