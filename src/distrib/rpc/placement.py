"""Where the variables of a parameter-server cluster live (TF's placement rules).

Every variable — or, when a partitioner splits it, every shard — goes to the next
``ps`` task round-robin: the first to ``ps:0``, the next to ``ps:1``, and so on.
A partitioner ``(shape, dtype) -> [n, 1, 1, ...]`` splits a variable of rank >= 1
into ``min(n, rows)`` shards along dimension 0, named ``"{name}/part_{i}"``, the
first ``rows % n`` of them one row longer ("div" partitioning).

Example:
    >>> placer = Placer(num_ps=3, partitioner=lambda shape, dtype: [5, 1])
    >>> v = placer.place("emb", (13, 4), "float32")
    >>> [s.rows for s in v.shards], [s.task for s in v.shards]
    ([(0, 3), (3, 6), (6, 9), (9, 11), (11, 13)], [0, 1, 2, 0, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distrib.errors import UsageError, explain

__all__ = ["Shard", "VariablePlacement", "Placer", "split_rows"]

Partitioner = Callable[..., Sequence[int]]


@dataclass(frozen=True)
class Shard:
    """One stored piece of a variable.

    Attributes:
        id: the shard's id, unique in the cluster.
        name: ``"{variable}"`` or ``"{variable}/part_{i}"``.
        task: index of the ``ps`` task that holds it.
        rows: ``(start, end)`` along dimension 0, or None for the whole variable.
    """

    id: int
    name: str
    task: int
    rows: tuple[int, int] | None


@dataclass(frozen=True)
class VariablePlacement:
    """A variable of the cluster and its shards.

    Attributes:
        id: the variable's id, unique in the cluster.
        name: the variable's name (its name in its module, e.g. ``"0.weight"``).
        shape: its full shape.
        shards: where its pieces live, in row order.
    """

    id: int
    name: str
    shape: tuple[int, ...]
    shards: tuple[Shard, ...]

    @property
    def tasks(self) -> list[int]:
        """The ``ps`` tasks holding this variable, per shard."""
        return [s.task for s in self.shards]


def split_rows(rows: int, parts: int) -> list[tuple[int, int]]:
    """TF's "div" split of ``rows`` into ``parts`` ranges (the first ones one row longer).

    Example:
        >>> split_rows(10, 4)
        [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    base, extra = divmod(rows, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


class Placer:
    """Assigns variables and shards to ``ps`` tasks, round-robin, in creation order.

    Args:
        num_ps: the number of ``ps`` tasks.
        partitioner: TF's ``variable_partitioner``, or None for whole variables.
    """

    def __init__(self, num_ps: int, partitioner: Partitioner | None = None) -> None:
        self.num_ps = num_ps
        self.partitioner = partitioner
        self._next_task = 0
        self._next_var = 0
        self._next_shard = 0

    def _task(self) -> int:
        task = self._next_task % self.num_ps
        self._next_task += 1
        return task

    def _partitions(self, shape: tuple[int, ...], dtype: Any) -> int:
        if self.partitioner is None or len(shape) == 0:
            return 1
        parts = list(self.partitioner(shape, dtype))
        if not parts or parts[0] == 0 or any(p != 1 for p in parts[1:]):
            raise UsageError(explain(
                "variable_partitioner result", parts, "variable_partitioner must return a "
                "list/tuple whose elements are 1 besides the first element (non-zero), got: "
                f"{parts!r}", "return [n, 1, ...] with one entry per dimension"))
        return max(1, min(int(parts[0]), shape[0]))

    def place(self, name: str, shape: Sequence[int], dtype: Any) -> VariablePlacement:
        """Place one variable; returns where its shards go."""
        dims = tuple(int(d) for d in shape)
        parts = self._partitions(dims, dtype)
        ranges: list[tuple[int, int] | None] = (
            [None] if parts == 1 else list(split_rows(dims[0], parts)))
        shards = []
        for i, rows in enumerate(ranges):
            shards.append(Shard(self._next_shard, name if rows is None else f"{name}/part_{i}",
                                self._task(), rows))
            self._next_shard += 1
        var = VariablePlacement(self._next_var, name, dims, tuple(shards))
        self._next_var += 1
        return var
