"""The step plan: which rows of which batches this replica receives at each step.

With one process per replica every replica builds the pipeline itself and
keeps only its own part.  A :class:`StepPlan` has one of four modes, the
ways TensorFlow 2.21 hands batches to replicas:

``stride``   item ``offset + s * stride``, whole (one replica; every L-th batch of a
             worker's ``dataset_fn`` pipeline); with ``concat`` C > 1 an item is C
             consecutive batches concatenated (an SPMD replica program takes the
             batches of its C devices);
``split``    global batch ``s`` cut into R ceil-sized pieces, replica ``(i, j)`` keeps
             piece ``i + j * W`` (TF's legacy rebatch, used with DATA sharding — the
             default for in-memory sources — on one worker as on several): a final 6 of
             G=8 on 2 replicas gives 3 + 3, and a piece may be empty;
``rebatch``  the worker's pipeline unbatched and re-batched with the sizes of
             ``batch_sizes_for_worker``, cycling across batch boundaries; the worker's
             replicas take its batches in turn (TF's rebatch, used with OFF, FILE and
             HINT sharding): a final 6 of G=8 on 2 replicas gives 4 + 2;
``pieces``   the worker's batches each cut into R ceil-sized pieces, its replicas take
             the pieces in turn (TF's legacy rebatch without DATA sharding, used when
             the batch size is unknown: batches from a DataLoader or generator).

Over a random-access pipeline an item is a lazy batch reference, so a replica
gathers only its own rows.

Example:
    >>> plan = StepPlan(Dataset.range(6).batch(8), "split", num_replicas=2,
    ...                 local_replicas=2, local_replica_id=1)
    >>> [b.tolist() for b in plan.items(ReadContext(), 0)]
    [[3, 4, 5]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from distrib.data import graph
from distrib.data.dataset import Dataset
from distrib.data.graph import BatchRef, ReadContext
from distrib.data.options import INFINITE, UNKNOWN
from distrib.input.digest import WORKER_SCOPE, checked_step, digest_of

__all__ = ["StepPlan", "piece_bounds", "rebatch_slices", "NO_ROWS"]


def piece_bounds(size: int, pieces: int, index: int) -> tuple[int, int]:
    """Rows of piece ``index`` when ``size`` rows are cut into ``pieces`` ceil-sized pieces.

    Example:
        >>> [piece_bounds(8, 3, k) for k in range(3)]
        [(0, 3), (3, 6), (6, 8)]
    """
    step = -(-size // pieces)
    lo = min(index * step, size)
    return lo, min(lo + step, size)


def rebatch_slices(batch_size: Callable[[int], int | None], sizes: Sequence[int]
                   ) -> Iterator[list[tuple[int, int, int]]]:
    """TensorFlow's rebatch: the ``(input batch, lo, hi)`` slices of each output batch.

    ``batch_size(k)`` is the number of rows of input batch ``k`` (None after the
    last), asked for ``k = 0, 1, ...`` in order and only when needed.  Output
    batch ``q`` wants ``sizes[q % len(sizes)]`` rows, taken across input batch
    boundaries.  A size of 0 gives an empty batch while the input has not been
    seen to end; the input ends at the first output batch that wants rows and
    finds none, after a last partial batch if any.

    Example:
        >>> rows = [3, 3, 1]
        >>> list(rebatch_slices(lambda k: rows[k] if k < len(rows) else None, [2, 0]))
        [[(0, 0, 2)], [], [(0, 2, 3), (1, 0, 1)], [], [(1, 1, 3)], [], [(2, 0, 1)]]
    """
    fetched, current, offset, rows = 0, -1, -1, 0
    for q in _cycle(len(sizes)):
        want, got, ended = sizes[q], 0, False
        out: list[tuple[int, int, int]] = []
        while got < want:
            if offset < 0:
                size = batch_size(fetched)
                if size is None:
                    ended = True
                    break
                current, offset, rows = fetched, 0, size
                fetched += 1
            end = min(offset + want - got, rows)
            if end > offset:
                out.append((current, offset, end))
            got += end - offset
            offset = -1 if end == rows else end
        if ended and got == 0:
            return
        yield out
        if ended:
            return


def _cycle(n: int) -> Iterator[int]:
    while True:
        yield from range(n)


class _Reader:
    """Item ``k`` of a pipeline: by index when random access, else by streaming forward."""

    def __init__(self, dataset: Dataset, ctx: ReadContext) -> None:
        self._ds = dataset
        self._ctx = ctx
        self._cardinality = graph.cardinality(dataset)
        self._ra = graph.is_random_access(dataset)
        self._it: Iterator[Any] | None = None
        self._next_index = 0
        self._last: tuple[int, Any] | None = None

    def get(self, k: int) -> Any:
        """Item ``k`` (or ``_END``); ``k`` never decreases between calls."""
        if self._ra:
            if self._cardinality != INFINITE and k >= self._cardinality:
                return _END
            return graph.read_item(self._ds, k, self._ctx)
        if self._last is not None and self._last[0] == k:
            return self._last[1]
        if self._it is None:
            self._it = graph.elements(self._ds, self._ctx)
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
_CHUNK = 1024


def _size(item: Any) -> int:
    return item.size() if isinstance(item, BatchRef) else graph.num_rows(item)


def _rows(item: Any, lo: int, hi: int) -> Any:
    if isinstance(item, BatchRef):
        return item.slice(lo, hi)
    return graph.slice_rows(item, lo, hi)


def _cheap_sizes(dataset: Dataset) -> Callable[[int], int | None] | None:
    """``k -> rows of batch k`` without reading data, for random-access batches; else None."""
    if graph.access(dataset) != "refs" or graph.cardinality(dataset) == UNKNOWN:
        return None
    card, ctx = graph.cardinality(dataset), ReadContext()
    first = graph.read_batches(dataset, torch.arange(min(1, card) if card >= 0 else 1), ctx)
    if any(kind == "map" for ref in first for kind, _ in ref.post):
        return None   # a batch-level map may change the number of rows
    cache: dict[int, list[int]] = {}

    def size(k: int) -> int | None:
        if card >= 0 and k >= card:
            return None
        chunk = k // _CHUNK
        if chunk not in cache:
            cache.clear()
            lo = chunk * _CHUNK
            hi = lo + _CHUNK if card < 0 else min(lo + _CHUNK, card)
            refs = graph.read_batches(dataset, torch.arange(lo, hi), ctx)
            cache[chunk] = [ref.size() for ref in refs]
        return cache[chunk][k - chunk * _CHUNK]
    return size


@dataclass
class StepPlan:
    """How this replica draws its batch of each step from ``dataset`` (see module doc).

    Attributes:
        sizes: the rebatch sizes of every worker (``rebatch`` mode), worker-indexed.
        source: the dataset as the user gave it, when ``dataset`` is this worker's
            share of it: its element spec shapes the empty batches of a worker whose
            share is empty.
        shared: every replica reads an identical pipeline, so every replica can
            compute the step count of all the others (no agreement needed).
        portable: a position counts global batches, so it can be restored with
            another number of replicas or workers.

    Example:
        >>> StepPlan(Dataset.range(10).batch(4), "split", num_replicas=2, num_workers=2).local_steps()
        3
    """

    dataset: Dataset
    mode: str
    num_replicas: int = 1
    num_workers: int = 1
    local_replicas: int = 1
    worker_index: int = 0
    local_replica_id: int = 0
    stride: int = 1
    offset: int = 0
    concat: int = 1
    sizes: tuple[tuple[int, ...], ...] = ()
    source: Dataset | None = None
    shared: bool = True
    portable: bool = True

    @property
    def takes_turns(self) -> bool:
        """Whether the replicas of a worker take the batches of one pipeline in turn (a
        ``dataset_fn`` pipeline, ``PER_WORKER``): they must all read the same one."""
        return self.mode == "stride" and self.concat == 1 and self.local_replicas > 1 \
            and self.stride == self.local_replicas

    # ----------------------------------------------------------------- steps
    def _outputs(self, worker: int) -> int:
        """Batches the rebatch of ``worker``'s sizes makes of this pipeline (or a constant)."""
        card = graph.cardinality(self.dataset)
        if card == INFINITE:
            return INFINITE
        size = _cheap_sizes(self.dataset)
        if size is None:
            return UNKNOWN
        return sum(1 for _ in rebatch_slices(size, self.sizes[worker]))

    def _rebatch_steps(self, worker: int, local_id: int) -> int:
        outputs = self._outputs(worker)
        if outputs < 0:
            return outputs
        return max(0, -(-(outputs - local_id) // self.local_replicas))

    def local_steps(self) -> int:
        """This replica's number of steps per epoch (``INFINITE``/``UNKNOWN`` possible)."""
        if self.mode == "rebatch":
            return self._rebatch_steps(self.worker_index, self.local_replica_id)
        return self._item_steps(self.offset)

    def _item_steps(self, offset: int) -> int:
        card = graph.cardinality(self.dataset)
        if card < 0:
            return card
        if self.mode == "stride":
            groups = -(-card // self.concat)
            return max(0, -(-(groups - offset) // self.stride))
        if self.mode == "pieces":
            return card * self.num_workers
        return card

    def total_steps(self, fewest: bool = False) -> int | None:
        """Steps of the longest replica (the shortest with ``fewest``) when provable from
        this process alone, else None."""
        if not self.shared:
            return None
        if self.mode == "rebatch":
            counts = [self._rebatch_steps(w, j) for w in range(self.num_workers)
                      for j in ((0, self.local_replicas - 1) if fewest else (0,))]
            total = UNKNOWN if UNKNOWN in counts else INFINITE if INFINITE in counts \
                else (min if fewest else max)(counts)
        else:
            total = self._item_steps(0)
        return None if total == UNKNOWN else total

    # ----------------------------------------------------------------- items
    def items(self, ctx: ReadContext, start: int, digests: dict[int, int] | None = None
              ) -> Iterator[Any]:
        """This replica's batches from step ``start`` on; ends when its share ends.

        With ``digests``, the fingerprint of the global batch that every replica splits
        (``split`` and ``pieces`` modes) is put there for the steps that
        :func:`~distrib.input.digest.checked_step` picks, keyed by step.
        """
        reader = _Reader(self.dataset, ctx)
        if self.mode == "rebatch":
            yield from self._rebatched(reader, start, digests if self.shared else None)
            return
        s = start
        in_turn = digests is not None and self.takes_turns
        while True:
            k, piece = self._locate(s)
            if in_turn and checked_step(s, start):  # the batch the worker's first replica takes
                first = reader.get(s * self.stride)
                if first is not _END:
                    first = first.materialize() if isinstance(first, BatchRef) else first
                    assert digests is not None
                    digests[s] = digest_of(first) | WORKER_SCOPE
            if self.concat > 1:
                item = self._concat(reader, k)
            else:
                item = reader.get(k)
            if item is _END:
                return
            if piece < 0:
                yield item.materialize() if isinstance(item, BatchRef) else item
            else:
                if digests is not None and self.shared and checked_step(s, start):
                    if isinstance(item, BatchRef):
                        item = item.materialize()
                    digests[s] = digest_of(item)
                yield _rows(item, *piece_bounds(_size(item), self.num_replicas, piece))
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
        return parts[0] if len(parts) == 1 else graph.cat(parts)

    def _locate(self, s: int) -> tuple[int, int]:
        """``(item index, piece index or -1 for the whole item)`` of step ``s``."""
        if self.mode == "stride":
            return self.offset + s * self.stride, -1
        if self.mode == "pieces":
            q = s * self.local_replicas + self.local_replica_id
            return q // self.num_replicas, q % self.num_replicas
        return s, self.worker_index + self.local_replica_id * self.num_workers

    def _rebatched(self, reader: _Reader, start: int, digests: dict[int, int] | None = None
                   ) -> Iterator[Any]:
        held: dict[int, Any] = {}

        def batch_size(k: int) -> int | None:
            item = reader.get(k)
            if item is _END:
                return None
            if isinstance(item, BatchRef) and (item.post or (digests is not None and k == 0)):
                item = item.materialize()   # map once, then slice
            if digests is not None and k == 0:  # the pipeline's first batch: every replica's
                digests[start] = digest_of(item)
            held[k] = item
            return _size(item)

        lr, mine = self.local_replicas, self.local_replica_id
        for q, slices in enumerate(rebatch_slices(batch_size, self.sizes[self.worker_index])):
            if q % lr == mine and q // lr >= start:
                parts = [_rows(held[k], lo, hi) for k, lo, hi in slices]
                yield graph.cat(parts) if parts else self._empty(held, reader)
            last = slices[-1][0] if slices else max(held, default=0)
            for k in [k for k in held if k < last]:
                del held[k]

    def _empty(self, held: dict[int, Any], reader: _Reader) -> Any:
        """A batch with no rows, shaped like the pipeline's batches."""
        if not held:
            item = reader.get(0)
            if item is _END:
                return NO_ROWS
            held[0] = item
        return _rows(held[max(held)], 0, 0)


NO_ROWS = object()
"""An empty batch of a pipeline that has no batch to shape it (the iterator uses the spec)."""
