"""Index-preserving transformations: shuffle, repeat, take, skip, shard, concatenate, batch.

Over a random-access input each of them only rewrites positions (see
:mod:`distrib.data._plan`), so the pipeline stays random access: reading any
batch, on any replica, at any epoch, costs one gather per component, and a
restored iterator jumps to its position without replaying data.  Over a
streaming input they stream.

``shuffle`` over a random-access input draws one permutation per (seed,
iteration key): ``randperm`` when the buffer holds the whole dataset, else
TF's buffered shuffle simulated on the indices (one Python step per element
per epoch), so a small buffer gives the same kind of order as in ``tf.data``.

Example:
    >>> ds = Dataset.range(10).shuffle(10, seed=0).repeat(2).shard(2, 1).batch(3)
    >>> ds._kind, int(ds.cardinality())
    ('refs', 4)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from distrib.data import _nest
from distrib.data._plan import BatchRef, Ctx, buffered_shuffle, generator, group_by, mix
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, SHARD_HINT, UNKNOWN
from distrib.errors import DataError, UsageError, explain

__all__ = ["Shuffle", "Repeat", "Take", "Skip", "Shard", "Concatenate", "Batch", "combine",
           "check_bool", "check_seed"]


def _check_int(what: str, value: Any, low: int, rule: str, fix: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(explain(what, value, rule, fix))
    return value


def check_bool(what: str, value: Any, fix: str) -> bool:
    """``value`` as a bool: a Python or NumPy bool, or a one-element torch bool tensor."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool:
        return bool(value.item())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise UsageError(explain(what, value, "must be a bool (True or False)", fix))


def check_seed(what: str, value: Any) -> int | None:
    """``value`` as an int seed (None: unseeded); a one-element integer tensor is accepted."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 \
            and not value.is_floating_point() and value.dtype != torch.bool:
        value = int(value.item())
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise UsageError(explain(what, value, "must be an int or None",
                                 "pass an integer such as seed=42, or None for a seed drawn "
                                 "from torch.initial_seed()"))
    return int(value.__index__())


def combine(kind: str | None, parts: list[Any], restore: torch.Tensor | None) -> Any:
    """Concatenate chunks (rows or batch references) and put them back in position order.

    Example:
        >>> combine('refs', [[1], [2, 3]], torch.tensor([2, 0, 1]))
        [3, 1, 2]
    """
    if kind == "refs":
        out = [r for part in parts for r in part]
        return out if restore is None else [out[i] for i in restore.tolist()]
    rows = _nest.cat(parts)
    return rows if restore is None else _nest.take(rows, restore)


class _Passthrough(Dataset):
    """A node with one input whose kind it keeps when the input is random access."""

    @property
    def _input(self) -> Dataset:
        return self._inputs[0]

    def _compute_kind(self) -> str | None:
        return self._inputs[0]._kind

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return self._input._batch_info()

    def _spec(self) -> Any:
        return self._input.element_spec


class Shuffle(_Passthrough):
    """``shuffle``: a permutation per (seed, iteration key) over random-access inputs.

    Example:
        >>> sorted(int(v) for v in Shuffle(Dataset.range(4), 4, 1, True))
        [0, 1, 2, 3]
    """

    def __init__(self, dataset: Dataset, buffer_size: int, seed: int | None,
                 reshuffle_each_iteration: bool) -> None:
        self._buffer = _check_int("buffer_size", buffer_size, 1,
                                  "buffer_size must be greater than zero",
                                  "use a buffer of at least 1 (the dataset size for a full "
                                  "shuffle)")
        self._seed = check_seed("shuffle seed", seed)
        self._reshuffle = check_bool("reshuffle_each_iteration", reshuffle_each_iteration,
                                     "pass True (a new order each epoch) or False")
        super().__init__(dataset)

    def _compute_kind(self) -> str | None:
        n = self._inputs[0]._card()
        return self._inputs[0]._kind if n >= 0 else None

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._buffer, self._seed, self._reshuffle)

    def _card(self) -> int:
        return self._input._card()

    def _generator(self, ctx: Ctx) -> torch.Generator:
        base = self._seed if self._seed is not None else mix(ctx.run_seed, self._uid)
        return generator(mix(base, ctx.key) if self._reshuffle else mix(base))

    def _perm(self, ctx: Ctx) -> torch.Tensor:
        def make() -> torch.Tensor:
            n = self._input._card()
            g = self._generator(ctx)
            if self._buffer >= n:
                return torch.randperm(n, generator=g)
            return torch.tensor(list(buffered_shuffle(range(n), self._buffer, g)),
                                dtype=torch.int64)
        key = (self._uid, ctx.key) if self._reshuffle else (self._uid,)
        return ctx.cached(key, make)  # type: ignore[no-any-return]

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(self._perm(ctx)[pos], ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return buffered_shuffle(self._input._elements(ctx), self._buffer, self._generator(ctx))


class _Counted(_Passthrough):
    """A node of ``repeat``, ``take`` or ``skip``: ``count`` elements (or passes), -1 for
    all of them (the rule and the fix of a bad count are the subclass's)."""

    _RULE = _FIX = ""

    def __init__(self, dataset: Dataset, count: int) -> None:
        self._count = _check_int("count", count, -1, self._RULE, self._FIX)
        super().__init__(dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._count,)


class Repeat(_Counted):
    """``repeat``: repetition ``r`` runs its input with iteration key ``key + (r,)``.

    Example:
        >>> int(Repeat(Dataset.range(3), None).cardinality())
        -1
    """

    _RULE, _FIX = "must be -1 (forever) or a count >= 0", "use repeat() to repeat forever"

    def __init__(self, dataset: Dataset, count: int | None) -> None:
        super().__init__(dataset, -1 if count is None else count)

    def _card(self) -> int:
        n = self._input._card()
        if self._count < 0:
            return 0 if n == 0 else INFINITE
        if self._count == 0:
            return 0
        if n < 0:
            return n
        return n * self._count

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        n = self._input._card()
        if n == INFINITE:
            return self._input._get(pos, ctx.child(0))
        groups, restore = group_by(pos // n)
        parts = [self._input._get(pos[idx] % n, ctx.child(rep)) for rep, idx in groups]
        return combine(self._kind, parts, restore)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        reps = itertools.count() if self._count < 0 else range(self._count)
        for rep in reps:
            produced = False
            for element in self._input._elements(ctx.child(rep)):
                produced = True
                yield element
            if not produced:
                return


class Take(_Counted):
    """``take``: the first ``count`` elements.

    Example:
        >>> [int(v) for v in Take(Dataset.range(5), 2)]
        [0, 1]
    """

    _RULE, _FIX = "must be -1 (all) or a count >= 0", "use take(-1) for every element"

    def _card(self) -> int:
        n = self._input._card()
        if self._count < 0:
            return n
        if n == INFINITE:
            return self._count
        if n == UNKNOWN:
            return UNKNOWN
        return min(n, self._count)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(pos, ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        it = self._input._elements(ctx)
        return it if self._count < 0 else itertools.islice(it, self._count)


class Skip(_Counted):
    """``skip``: all but the first ``count`` elements.

    Example:
        >>> [int(v) for v in Skip(Dataset.range(5), 3)]
        [3, 4]
    """

    _RULE = "must be -1 (skip all) or a count >= 0"
    _FIX = "use skip(-1) to skip every element"

    def _card(self) -> int:
        n = self._input._card()
        if self._count < 0:
            return 0
        if n < 0:
            return n
        return max(0, n - self._count)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(pos + self._count, ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        if self._count < 0:
            return iter(())
        return itertools.islice(self._input._elements(ctx), self._count, None)


class Shard(_Passthrough):
    """``shard``: elements ``index, index + num_shards, ...``.

    Example:
        >>> [int(v) for v in Shard(Dataset.range(5), 2, 1)]
        [1, 3]
    """

    def __init__(self, dataset: Dataset, num_shards: int, index: int) -> None:
        hint = num_shards == SHARD_HINT
        if not hint:
            _check_int("num_shards", num_shards, 1, "must be positive", "use shard(2, 0), say")
            _check_int("index", index, 0,
                       f"Index must be between 0 and {num_shards - 1} (inclusive)",
                       f"use an index from 0 to {num_shards - 1}")
            if index >= num_shards:
                raise UsageError(explain("index", index,
                                         f"Index must be between 0 and {num_shards - 1} "
                                         "(inclusive)", f"use an index from 0 to {num_shards - 1}"))
        self._num = num_shards
        self._index = index
        super().__init__(dataset)

    @property
    def is_hint(self) -> bool:
        """Whether this is a ``shard(SHARD_HINT, ...)`` placeholder."""
        return self._num == SHARD_HINT

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._num, self._index)

    def _check(self) -> None:
        if self.is_hint:
            raise DataError(explain(
                "shard(num_shards)", "SHARD_HINT",
                "is a placeholder that only AutoShardPolicy.HINT fills in "
                "(with the number of workers)",
                "distribute the dataset with the HINT auto-shard policy, or shard explicitly"))

    def _card(self) -> int:
        if self.is_hint:
            return self._input._card()
        n = self._input._card()
        if n < 0:
            return n
        return n // self._num + (1 if self._index < n % self._num else 0)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        self._check()
        return self._input._get(pos * self._num + self._index, ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        self._check()
        return itertools.islice(self._input._elements(ctx), self._index, None, self._num)


class Concatenate(Dataset):
    """``concatenate``: one dataset after the other.

    Example:
        >>> [int(v) for v in Concatenate(Dataset.range(1), Dataset.range(1))]
        [0, 0]
    """

    def __init__(self, first: Dataset, second: Dataset) -> None:
        if not isinstance(second, Dataset):
            raise UsageError(explain("concatenate(dataset)", type(second).__name__,
                                     "must be a distrib.data.Dataset", "wrap it with "
                                     "Dataset.from_tensor_slices first"))
        super().__init__(first, second)

    def _compute_kind(self) -> str | None:
        a, b = self._inputs
        return a._kind if a._kind == b._kind and a._card() >= 0 and b._card() != UNKNOWN \
            else None

    def _card(self) -> int:
        a, b = (d._card() for d in self._inputs)
        if INFINITE in (a, b):
            return INFINITE
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return self._inputs[0]._batch_info()

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        a, b = self._inputs
        na = a._card()
        groups, restore = group_by((pos >= na).to(torch.int64))
        parts = [(b._get(pos[idx] - na, ctx) if which else a._get(pos[idx], ctx))
                 for which, idx in groups]
        return combine(self._kind, parts, restore)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        yield from self._inputs[0]._elements(ctx)
        yield from self._inputs[1]._elements(ctx)

    def _spec(self) -> Any:
        return self._inputs[0].element_spec


class Batch(_Passthrough):
    """``batch``: over a random-access input, batches are lazy :class:`BatchRef` ranges.

    Example:
        >>> Batch(Dataset.range(5), 2, False)._get(torch.tensor([2]), Ctx())[0].positions
        tensor([4])
    """

    def __init__(self, dataset: Dataset, batch_size: int, drop_remainder: bool) -> None:
        self._size = _check_int("batch_size", batch_size, 1, "must be a positive int",
                                "use the global batch size, e.g. 64 * num_replicas_in_sync")
        self._drop = check_bool("drop_remainder", drop_remainder,
                                "pass True to drop a last partial batch, False to keep it")
        super().__init__(dataset)

    def _compute_kind(self) -> str | None:
        return "refs" if self._inputs[0]._kind == "rows" else None

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._size, self._drop)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (True, self._size, self._drop)

    def _card(self) -> int:
        n = self._input._card()
        if n < 0:
            return n
        return n // self._size if self._drop else -(-n // self._size)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> list[BatchRef]:
        n = self._input._card()
        refs = []
        for k in pos.tolist():
            lo = k * self._size
            hi = lo + self._size if n == INFINITE else min(lo + self._size, n)
            refs.append(BatchRef(self._input, torch.arange(lo, hi), ctx))
        return refs

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        buf: list[Any] = []
        for element in self._input._elements(ctx):
            buf.append(element)
            if len(buf) == self._size:
                yield _nest.stack(buf)
                buf = []
        if buf and not self._drop:
            yield _nest.stack(buf)

    def _spec(self) -> Any:
        inner = self._input.element_spec
        if inner is None:
            return None
        lead = self._size if self._drop else None
        return _nest.map_structure(
            lambda s: None if s is None else type(s)((lead, *s.shape), s.dtype), inner)

