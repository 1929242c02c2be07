"""The step plan: which rows of which batch this replica receives at each step.

With one process per replica every replica builds the pipeline itself and
keeps only its own part.  A :class:`StepPlan` maps step ``s`` to an item
(batch or element) of the pipeline and a selection of its rows:

``stride``  item ``offset + s * stride``, whole (one replica; every L-th batch of a
            worker's ``dataset_fn`` pipeline; one element per worker unbatched);
            with ``concat`` C > 1 a "item" is C consecutive batches concatenated
            (an SPMD replica program takes the batches of its C devices);
``split``   one worker: global batch ``s`` split by ``batch_sizes_for_worker``,
            sub-batches filled in order (a final 6 of G=8 on 2 replicas: 4 + 2);
``data``    multi-worker DATA: global batch ``s`` cut into R ceil-sized pieces,
            replica ``(i, j)`` keeps piece ``i + j * W`` (TF's legacy rebatch);
``pieces``  multi-worker OFF/FILE/HINT: the worker's own batches cut into R
            pieces, its replicas take consecutive pieces.

Over a random-access pipeline an item is a lazy batch reference, so a replica
gathers only its own rows and jumps to any step in O(1).

Example:
    >>> plan = StepPlan(Dataset.range(6).batch(8), "split", num_replicas=2,
    ...                 local_replicas=2, local_replica_id=1, global_batch=8)
    >>> [b.tolist() for b in plan.items(Ctx(), 0)]
    [[4, 5]]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from distrib.data import _nest
from distrib.data._plan import BatchRef, Ctx
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.input.context import batch_sizes_for_worker

__all__ = ["StepPlan", "piece_bounds"]


def piece_bounds(size: int, pieces: int, index: int) -> tuple[int, int]:
    """Rows of piece ``index`` when ``size`` rows are cut into ``pieces`` ceil-sized pieces.

    Example:
        >>> [piece_bounds(8, 3, k) for k in range(3)]
        [(0, 3), (3, 6), (6, 8)]
    """
    step = -(-size // pieces)
    lo = min(index * step, size)
    return lo, min(lo + step, size)


class _Reader:
    """Item ``k`` of a pipeline: by index when random access, else by streaming forward."""

    def __init__(self, dataset: Dataset, ctx: Ctx) -> None:
        self._ds = dataset
        self._ctx = ctx
        self._card = dataset._card()
        self._ra = dataset._kind is not None
        self._it: Iterator[Any] | None = None
        self._next_index = 0
        self._last: tuple[int, Any] | None = None

    def get(self, k: int) -> Any:
        """Item ``k`` (or ``_END``); ``k`` never decreases between calls."""
        if self._ra:
            if self._card != INFINITE and k >= self._card:
                return _END
            got = self._ds._get(torch.tensor([k]), self._ctx)
            return got[0] if self._ds._kind == "refs" else _nest.unstack(got)[0]
        if self._last is not None and self._last[0] == k:
            return self._last[1]
        if self._it is None:
            self._it = self._ds._elements(self._ctx)
        item: Any = _END
        while self._next_index <= k:
            item = next(self._it, _END)
            self._next_index += 1
            if item is _END:
                self._next_index = k + 1
                break
        self._last = (k, item)
        return item


_END = object()


def _size(item: Any) -> int:
    return item.size() if isinstance(item, BatchRef) else _nest.num_rows(item)


def _rows(item: Any, lo: int, hi: int) -> Any:
    if isinstance(item, BatchRef):
        return item.slice(lo, hi)
    return _nest.slice_rows(item, lo, hi)


@dataclass
class StepPlan:
    """How this replica draws its batch of each step from ``dataset`` (see module doc).

    Attributes:
        shared: every replica reads an identical pipeline, so every replica can
            compute the step count of all the others (no agreement needed).
        portable: a position counts global batches, so it can be restored with
            another number of replicas or workers.

    Example:
        >>> StepPlan(Dataset.range(10).batch(4), "data", num_replicas=2, num_workers=2).local_steps()
        3
    """

    dataset: Dataset
    mode: str
    num_replicas: int = 1
    num_workers: int = 1
    local_replicas: int = 1
    worker_index: int = 0
    local_replica_id: int = 0
    global_batch: int | None = None
    stride: int = 1
    offset: int = 0
    concat: int = 1
    shared: bool = True
    portable: bool = True

    # ----------------------------------------------------------------- steps
    def _steps_from(self, card: int, offset: int) -> int:
        if card < 0:
            return card
        if self.mode == "stride":
            groups = -(-card // self.concat)
            return max(0, -(-(groups - offset) // self.stride))
        if self.mode == "pieces":
            return card * self.num_workers
        return card

    def local_steps(self) -> int:
        """This replica's number of steps per epoch (``INFINITE``/``UNKNOWN`` possible)."""
        return self._steps_from(self.dataset._card(), self.offset)

    def total_steps(self) -> int | None:
        """Steps of the longest replica when provable from this process alone, else None."""
        if not self.shared:
            return None
        total = self._steps_from(self.dataset._card(), 0)
        return None if total == UNKNOWN else total

    # ----------------------------------------------------------------- items
    def _locate(self, s: int) -> tuple[int, int]:
        """``(item index, piece index)`` of step ``s``."""
        if self.mode == "stride":
            return self.offset + s * self.stride, -1
        if self.mode == "pieces":
            q = s * self.local_replicas + self.local_replica_id
            return q // self.num_replicas, q % self.num_replicas
        if self.mode == "data":
            return s, self.worker_index + self.local_replica_id * self.num_workers
        return s, self.local_replica_id

    def _select(self, item: Any, piece: int) -> Any:
        if piece < 0:
            return item.materialize() if isinstance(item, BatchRef) else item
        size = _size(item)
        g = self.global_batch
        if self.mode == "split" and g is not None and size <= g:
            sizes = batch_sizes_for_worker(g, 1, self.num_replicas, 0)
            start = sum(sizes[:piece])
            lo, hi = min(start, size), min(start + sizes[piece], size)
        else:
            lo, hi = piece_bounds(size, self.num_replicas, piece)
        return _rows(item, lo, hi)

    def items(self, ctx: Ctx, start: int) -> Iterator[Any]:
        """This replica's batches from step ``start`` on; ends when its share ends."""
        reader = _Reader(self.dataset, ctx)
        s = start
        while True:
            k, piece = self._locate(s)
            if self.concat > 1:
                item = self._concat(reader, k)
            else:
                item = reader.get(k)
            if item is _END:
                return
            yield self._select(item, piece)
            s += 1

    def _concat(self, reader: _Reader, k: int) -> Any:
        """Items ``k * concat`` ... ``k * concat + concat - 1`` concatenated (fewer at the end)."""
        parts = []
        for i in range(k * self.concat, (k + 1) * self.concat):
            item = reader.get(i)
            if item is _END:
                break
            parts.append(item.materialize() if isinstance(item, BatchRef) else item)
        if not parts:
            return _END
        return parts[0] if len(parts) == 1 else _nest.cat(parts)
