"""Python generators and ``distrib.utils.Sequence`` as inputs of ``fit``/``evaluate``/``predict``.

Keras accepts a generator that yields batches — ``(x, y)``, ``(x, y, sample_weight)``
or ``x`` — and a ``keras.utils.Sequence``, an object that returns batch ``i`` from
``__getitem__(i)``, has ``__len__`` batches and is told ``on_epoch_end()``.

Every replica process runs the same program, so each one's generator (or
Sequence) yields the same *global* batches; each replica keeps its own slice of
every batch, exactly as with in-memory arrays or a batched dataset (sizes follow
TensorFlow's split).  The first batch is compared across replicas once per call
(a checksum): a generator that yields different data in different processes — an
unseeded random generator, a file that differs between machines — raises an error
instead of training on a mix.

A generator is consumed once: without ``steps_per_epoch`` the first epoch runs
until it ends and the next epoch finds it exhausted, stops training and warns
(Keras' behaviour); give ``steps_per_epoch`` for a generator that never ends.  A
Sequence is read again every epoch, in shuffled batch order when ``fit(shuffle=True)``
(the same order on every replica), and ``on_epoch_end()`` is called after each epoch.

Example::

    class Batches(distrib.utils.Sequence):
        def __len__(self):
            return math.ceil(len(x) / 64)
        def __getitem__(self, i):
            return x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]

    model.fit(Batches(), epochs=3)
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from distrib.data import AutoShardPolicy, Dataset, Options
from distrib.data.sources import Generator

__all__ = ["Sequence", "is_generator", "generator_dataset", "sequence_dataset"]


class Sequence:
    """Base class of datasets of batches read by index (Keras' ``utils.Sequence``).

    Implement ``__len__`` (the number of batches) and ``__getitem__(index)`` (one
    global batch: ``x``, ``(x, y)`` or ``(x, y, sample_weight)`` as arrays or
    tensors); ``on_epoch_end`` is called after every epoch.

    Example:
        >>> class Squares(Sequence):
        ...     def __len__(self):
        ...         return 2
        ...     def __getitem__(self, i):
        ...         return np.arange(4) * i, np.arange(4) ** 2
        >>> len(Squares()), Squares()[1][0].tolist()
        (2, [0, 1, 2, 3])
    """

    def __getitem__(self, index: int) -> Any:
        """Batch ``index``."""
        raise NotImplementedError("Subclasses of Sequence implement __getitem__(index)")

    def __len__(self) -> int:
        """The number of batches in one epoch."""
        raise NotImplementedError("Subclasses of Sequence implement __len__()")

    def on_epoch_end(self) -> None:
        """Called at the end of every epoch (shuffle your data here if you like)."""

    def __iter__(self) -> Iterator[Any]:
        """Every batch, in order."""
        for i in range(len(self)):
            yield self[i]


def is_generator(x: Any) -> bool:
    """Whether ``x`` is a Python generator or another one-pass iterator of batches."""
    return isinstance(x, (types.GeneratorType, itertools.chain)) or (
        isinstance(x, Iterator) and not isinstance(x, (Dataset, Sequence)))


def _data_sharded(ds: Dataset) -> Dataset:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    return ds.with_options(opts)


def generator_dataset(gen: Iterator[Any]) -> tuple[Dataset, Any]:
    """A dataset of the generator's global batches, and its first batch (peeked, put back)."""
    first = next(gen, None)
    if first is None:
        return _data_sharded(Generator(lambda: iter(()), batched=True)), None
    chained = itertools.chain([first], gen)
    return _data_sharded(Generator(lambda: chained, batched=True)), first


class _EpochOrder:
    """The batch order of each epoch: shuffled with a seed every replica shares."""

    def __init__(self, n: int, shuffle: bool, seed: int) -> None:
        self.n, self.shuffle, self.seed, self.epoch = n, shuffle, seed, 0

    def next_epoch(self) -> list[int]:
        if not self.shuffle:
            order = list(range(self.n))
        else:
            rng = np.random.RandomState((self.seed * 1_000_003 + self.epoch) % 2**32)
            order = rng.permutation(self.n).tolist()
        self.epoch += 1
        return order


def sequence_dataset(seq: Sequence, shuffle: bool, seed: int) -> tuple[Dataset, Any]:
    """A dataset reading ``seq`` batch by batch every epoch, and the first batch."""
    order = _EpochOrder(len(seq), shuffle, seed)

    def batches() -> Iterator[Any]:
        for i in order.next_epoch():
            yield seq[i]

    first = seq[0] if len(seq) else None
    return _data_sharded(Generator(batches, batched=True)), first
