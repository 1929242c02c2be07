"""``distrib.data.Dataset``: the ``tf.data.Dataset`` API over torch tensors.

A dataset is an immutable description of a pipeline; iterating it (``for x in
ds``) runs one *epoch*.  Random-access pipelines (see :mod:`distrib.data._plan`)
are read by vectorised index gathers; others stream element by element.

Every dataset node implements a small protocol, private to this package (the
layers above, :mod:`distrib.input` first, read it through :mod:`distrib.data.graph`):

``_card()``      static cardinality (``INFINITE``/``UNKNOWN`` constants);
``_kind``        ``"rows"`` (random access to elements), ``"refs"`` (random
                 access to batches, as :class:`~distrib.data._plan.BatchRef`) or
                 None (streaming only);
``_get(pos, ctx)`` the elements (rows) or batch references at ``pos``;
``_stream(ctx)``  the elements of one iteration, for streaming nodes;
``_elements(ctx)`` the elements of one iteration, whatever the kind.

Example:
    >>> ds = Dataset.range(10).shuffle(10, seed=1).batch(4)
    >>> [b.tolist() for b in ds] == [b.tolist() for b in ds]   # a new order per epoch
    False
    >>> int(ds.cardinality())
    3
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from distrib.data import _nest
from distrib.data._plan import Ctx, mix
from distrib.data.constructors import DatasetSources
from distrib.data.methods import (
    DatasetMethods,
    check_flag,
    check_parallel_calls,
    check_path,
)
from distrib.data.options import INFINITE, UNKNOWN, Options, spec_of
from distrib.errors import InvalidTypeError, explain

__all__ = ["Dataset"]

_MASK = (1 << 63) - 1


class Dataset(DatasetMethods, DatasetSources):
    """A ``tf.data``-style input pipeline whose elements are nests of torch tensors.

    Build one with a source (:meth:`from_tensor_slices`, :meth:`range`,
    :meth:`from_generator`, :meth:`from_torch`, :meth:`list_files`,
    :class:`~distrib.data.TextLineDataset`), chain transformations, and iterate
    it or hand it to ``strategy.experimental_distribute_dataset``.

    Example:
        >>> x = torch.arange(12.0).reshape(6, 2); y = torch.arange(6)
        >>> ds = Dataset.from_tensor_slices((x, y)).batch(4)
        >>> [tuple(t.shape) for t in next(iter(ds))]
        [(4, 2), (4,)]
    """

    def __init__(self, *inputs: Dataset) -> None:
        self._inputs: tuple[Dataset, ...] = tuple(inputs)
        self._epochs = 0
        self._run_seed: int | None = None
        self._spec_cache: Any = None
        self._kind: str | None = self._compute_kind()
        self._uid: int = mix(type(self).__name__, self._uid_parts(),
                             *[d._uid for d in inputs])

    # ------------------------------------------------------------ node protocol
    def _compute_kind(self) -> str | None:
        return None

    def _uid_parts(self) -> tuple[Any, ...]:
        return ()

    def _card(self) -> int:
        return UNKNOWN

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        raise NotImplementedError(type(self).__name__)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        raise NotImplementedError(type(self).__name__)

    def _pure(self) -> bool:
        """Whether elements depend only on positions (no user code runs)."""
        return all(d._pure() for d in self._inputs)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        """``(batched, batch_size or None, drop_remainder)`` seen from the end of the pipeline."""
        return (False, None, False)

    def _elements(self, ctx: Ctx) -> Iterator[Any]:
        if self._kind is not None:
            return self._ra_elements(ctx)
        return self._stream(ctx)

    def _ra_elements(self, ctx: Ctx) -> Iterator[Any]:
        n = self._card()
        step = 8 if self._kind == "refs" else 256
        start = 0
        while n == INFINITE or start < n:
            stop = start + step if n == INFINITE else min(start + step, n)
            chunk = self._get(torch.arange(start, stop), ctx)
            if self._kind == "refs":
                for ref in chunk:
                    yield ref.materialize()
            else:
                yield from _nest.unstack(chunk)
            start = stop

    def _spec(self) -> Any:
        if self._kind == "rows" and self._card() != 0:
            return spec_of(_nest.unstack(self._get(torch.arange(1), Ctx(probe=True)))[0])
        it = self._elements(Ctx(probe=True))
        first = next(it, _MISSING)
        close = getattr(it, "close", None)
        if close is not None:
            close()
        if first is _MISSING:
            return None
        batched, _, drop = self._batch_info()
        return spec_of(first, batch_dim_unknown=batched and not drop)

    def _replace_inputs(self, inputs: tuple[Dataset, ...]) -> Dataset:
        """A copy of this node reading ``inputs`` instead (for sharding rewrites)."""
        out = copy.copy(self)
        Dataset.__init__(out, *inputs)
        return out

    def _run_seed_value(self) -> int:
        if self._run_seed is None:
            self._run_seed = torch.initial_seed() & _MASK
        return self._run_seed

    # ------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Any]:
        """Start a new epoch: a reshuffling ``shuffle`` draws a new order each time.

        The iterator's position can be saved (``state_dict``), e.g. by a checkpoint.
        """
        from distrib.data.iterator import DatasetIterator

        ctx = Ctx(epoch=self._epochs, run_seed=self._run_seed_value())
        self._epochs += 1
        return DatasetIterator(self, ctx)

    def as_numpy_iterator(self) -> Iterator[Any]:
        """Iterate with numpy arrays instead of tensors (``tf.data`` habit).

        Example:
            >>> list(Dataset.range(2).as_numpy_iterator())
            [array(0), array(1)]
        """
        for element in self:
            yield _nest.map_structure(
                lambda x: x.numpy() if isinstance(x, torch.Tensor) else x, element)

    def cardinality(self) -> torch.Tensor:
        """The number of elements: an int64 scalar, or ``INFINITE`` (-1) / ``UNKNOWN`` (-2).

        Example:
            >>> int(Dataset.range(10).batch(3).cardinality()), int(Dataset.range(3).repeat().cardinality())
            (4, -1)
        """
        return torch.tensor(self._card(), dtype=torch.int64)

    def __len__(self) -> int:
        n = self._card()
        if n == INFINITE:
            raise InvalidTypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise InvalidTypeError("The dataset length is unknown.")
        return n

    def __bool__(self) -> bool:
        return True

    @property
    def element_spec(self) -> Any:
        """The nested :class:`TensorSpec` of one element (batch dimensions may be None).

        Example:
            >>> Dataset.range(5).batch(2).element_spec
            TensorSpec(shape=(None,), dtype=torch.int64)
        """
        if self._spec_cache is None:
            self._spec_cache = self._spec()
        return self._spec_cache

    def options(self) -> Options:
        """The options of this pipeline: every ``with_options`` upstream, later ones winning.

        Example:
            >>> Dataset.range(3).options().experimental_distribute.auto_shard_policy
            <AutoShardPolicy.AUTO: 0>
        """
        merged = Options()
        for d in self._inputs:
            merged = merged.merge(d.options())
        own = getattr(self, "_own_options", None)
        return merged.merge(own) if own is not None else merged

    def __repr__(self) -> str:
        return f"<{type(self).__name__} cardinality={self._card()}>"

    # --------------------------------------------------------- transformations
    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None) -> Dataset:
        """Apply ``map_func`` to every element (tuples are unpacked into arguments).

        Placed after ``batch`` it runs once per batch (vectorised); before
        ``batch`` once per element.  ``num_parallel_calls`` runs calls in
        threads; the order of elements is kept.

        Example:
            >>> [int(x) for x in Dataset.range(3).map(lambda x: x * 10)]
            [0, 10, 20]
        """
        from distrib.data.streams import Map
        check_flag("deterministic", deterministic, optional=True)
        return Map(self, map_func, num_parallel_calls)

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keep the elements for which ``predicate`` is true.

        Example:
            >>> [int(x) for x in Dataset.range(6).filter(lambda x: x % 2 == 0)]
            [0, 2, 4]
        """
        from distrib.data.streams import Filter
        return Filter(self, predicate)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> Dataset:
        """Randomly shuffle with a buffer of ``buffer_size`` elements (``tf.data`` semantics).

        A buffer at least as large as the dataset gives a uniform permutation.
        The order depends only on (seed, epoch, repetition).  Without a seed,
        the seed comes from ``torch.initial_seed()`` — so ``torch.manual_seed``
        makes it reproducible — and a distributed dataset uses the chief's.

        Example:
            >>> sorted(int(x) for x in Dataset.range(5).shuffle(5, seed=3))
            [0, 1, 2, 3, 4]
        """
        from distrib.data.transforms import Shuffle
        return Shuffle(self, buffer_size, seed, reshuffle_each_iteration)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None, deterministic: bool | None = None
              ) -> Dataset:
        """Combine consecutive elements into batches (a new leading dimension).

        Example:
            >>> [b.tolist() for b in Dataset.range(5).batch(2)]
            [[0, 1], [2, 3], [4]]
        """
        from distrib.data.transforms import Batch
        check_parallel_calls(num_parallel_calls)
        check_flag("deterministic", deterministic, optional=True)
        return Batch(self, batch_size, drop_remainder)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False) -> Dataset:
        """Batch elements of different shapes, padding each component to a common shape.

        ``padded_shapes`` (one shape per component, in the element's structure)
        gives each dimension a fixed size, or None / -1 for the largest in the
        batch; without it every dimension pads to the batch's largest.
        ``padding_values`` (one scalar per component, or one for all) default
        to 0 (False for bool) and the empty string for strings.  An element
        larger than a fixed size is an error.  Distributed, a padded global
        batch is split among replicas like any batch.

        Example:
            >>> ds = Dataset.range(1, 4).map(lambda x: torch.full((int(x),), int(x)))
            >>> [b.tolist() for b in ds.padded_batch(2, padding_values=-1)]
            [[[1, -1], [2, 2]], [[3, 3, 3]]]
        """
        from distrib.data.padding import PaddedBatch
        return PaddedBatch(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def unbatch(self) -> Dataset:
        """Split every batch back into elements.

        Example:
            >>> [int(x) for x in Dataset.range(3).batch(2).unbatch()]
            [0, 1, 2]
        """
        from distrib.data.streams import Unbatch
        return Unbatch(self)

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeat the dataset ``count`` times (None or -1: forever).

        Example:
            >>> [int(x) for x in Dataset.range(2).repeat(2)]
            [0, 1, 0, 1]
        """
        from distrib.data.transforms import Repeat
        return Repeat(self, count)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (-1: all).

        Example:
            >>> [int(x) for x in Dataset.range(5).take(2)]
            [0, 1]
        """
        from distrib.data.transforms import Take
        return Take(self, count)

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (-1: skip everything).

        Example:
            >>> [int(x) for x in Dataset.range(5).skip(3)]
            [3, 4]
        """
        from distrib.data.transforms import Skip
        return Skip(self, count)

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``.

        ``shard(SHARD_HINT, SHARD_HINT)`` is a placeholder that
        ``AutoShardPolicy.HINT`` replaces by ``shard(num_workers, worker_index)``.

        Example:
            >>> [int(x) for x in Dataset.range(7).shard(3, 1)]
            [1, 4]
        """
        from distrib.data.transforms import Shard
        return Shard(self, num_shards, index)

    def prefetch(self, buffer_size: int) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead in a background thread.

        Example:
            >>> from distrib.data import AUTOTUNE
            >>> [int(x) for x in Dataset.range(3).prefetch(AUTOTUNE)]
            [0, 1, 2]
        """
        from distrib.data.streams import Prefetch
        return Prefetch(self, buffer_size)

    def cache(self, filename: str | os.PathLike[str] = "") -> Dataset:
        """Keep the elements of the first complete pass and replay them on later passes.

        Without ``filename``, in memory; with one, the first complete pass
        writes ``<filename>.<fingerprint>.cache`` (atomically, by one process)
        and later passes and runs read it (see :mod:`distrib.data.cache`).
        Over arrays or ``range`` alone it reads through: that is as cheap.

        Example:
            >>> ds = Dataset.range(3).map(lambda x: x + 1).cache()
            >>> [int(x) for x in ds] == [int(x) for x in ds]
            True
        """
        from distrib.data.cache import Cache
        return Cache(self, check_path("cache filename", filename))

    def enumerate(self, start: int = 0) -> Dataset:
        """Pair every element with its index: ``(index, element)``.

        Example:
            >>> [(int(i), int(x)) for i, x in Dataset.range(5, 7).enumerate()]
            [(0, 5), (1, 6)]
        """
        from distrib.data.streams import Enumerate
        return Enumerate(self, start)

    def concatenate(self, dataset: Dataset) -> Dataset:
        """The elements of this dataset followed by those of ``dataset``.

        Example:
            >>> [int(x) for x in Dataset.range(2).concatenate(Dataset.range(5, 6))]
            [0, 1, 5]
        """
        from distrib.data.transforms import Concatenate
        return Concatenate(self, dataset)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None,
                   block_length: int = 1, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None) -> Dataset:
        """Map every element to a dataset and interleave their elements (``tf.data`` order).

        ``cycle_length`` None or ``AUTOTUNE`` means 4 (fixed, so every worker
        sees the same order on any machine).

        Example:
            >>> ds = Dataset.range(1, 3).interleave(lambda x: Dataset.from_tensors(x).repeat(2),
            ...                                    cycle_length=2)
            >>> [int(x) for x in ds]
            [1, 2, 1, 2]
        """
        from distrib.data.streams import Interleave
        return Interleave(self, map_func, cycle_length, block_length)

    def flat_map(self, map_func: Callable[..., Dataset]) -> Dataset:
        """Map every element to a dataset and chain them.

        Example:
            >>> [int(x) for x in Dataset.range(1, 3).flat_map(lambda x: Dataset.range(x))]
            [0, 0, 1]
        """
        from distrib.data.streams import Interleave
        return Interleave(self, map_func, 1, 1)

    def with_options(self, options: Options) -> Dataset:
        """This dataset with ``options`` set (merged over earlier options).

        Example:
            >>> from distrib.data import AutoShardPolicy
            >>> o = Options(); o.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
            >>> Dataset.range(2).with_options(o).options().experimental_distribute.auto_shard_policy
            <AutoShardPolicy.OFF: -1>
        """
        from distrib.data.streams import WithOptions
        if not isinstance(options, Options):
            raise InvalidTypeError(explain("options", options, "must be a distrib.data.Options",
                                           "build one with distrib.data.Options()"))
        return WithOptions(self, options)


_MISSING = object()
