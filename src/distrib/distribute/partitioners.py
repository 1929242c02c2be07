"""Variable partitioners for ``ParameterServerStrategy`` (``tf.distribute.experimental.partitioners``).

A partitioner is called with a variable's shape and dtype and returns the number of
partitions per axis; only the first axis may be split (every other entry is 1).
``ParameterServerStrategy(variable_partitioner=...)`` splits a parameter into that
many shards along dimension 0 (the first ``rows % n`` shards get one extra row) and
places the shards on the ``ps`` tasks round-robin.

Example:
    >>> import torch
    >>> FixedShardsPartitioner(num_shards=2)((10, 3), torch.float32)
    [2, 1]
    >>> MinSizePartitioner(min_shard_bytes=4, max_shards=10)((6, 1), torch.float32)
    [6, 1]
    >>> MaxSizePartitioner(max_shard_bytes=4, max_shards=2)((6, 1), torch.float32)
    [2, 1]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from distrib.errors import UsageError, explain

__all__ = ["Partitioner", "FixedShardsPartitioner", "MinSizePartitioner",
           "MaxSizePartitioner"]


def _element_size(dtype: Any, bytes_per_string: int) -> int:
    if isinstance(dtype, torch.dtype):
        return int(torch.empty((), dtype=dtype).element_size())
    return bytes_per_string  # strings (TF's only non-numeric dtype) have no fixed size


def _shape(shape: Sequence[int] | torch.Size) -> list[int]:
    return [int(d) for d in shape]


def _positive(what: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(explain(what, value, f"Argument `{what}` must be positive",
                                 "pass a positive integer"))


class Partitioner:
    """Base class: ``partitioner(shape, dtype) -> [partitions of axis 0, 1, 1, ...]``."""

    def __call__(self, shape: Sequence[int] | torch.Size, dtype: Any, axis: int = 0
                 ) -> list[int]:
        raise NotImplementedError


class FixedShardsPartitioner(Partitioner):
    """A fixed number of shards (at most one per row).

    Example:
        >>> FixedShardsPartitioner(num_shards=5)((13, 4), torch.float32)
        [5, 1]
    """

    def __init__(self, num_shards: int) -> None:
        _positive("num_shards", num_shards)
        self._num_shards = num_shards

    def __call__(self, shape: Sequence[int] | torch.Size, dtype: Any, axis: int = 0
                 ) -> list[int]:
        dims = _shape(shape)
        result = [1] * len(dims)
        result[axis] = min(self._num_shards, dims[axis])
        return result


class MinSizePartitioner(Partitioner):
    """As many shards as possible, each at least ``min_shard_bytes``, at most ``max_shards``.

    Example:
        >>> MinSizePartitioner(min_shard_bytes=4, max_shards=2)((6, 1), torch.float32)
        [2, 1]
    """

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1,
                 bytes_per_string: int = 16) -> None:
        _positive("min_shard_bytes", min_shard_bytes)
        _positive("max_shards", max_shards)
        _positive("bytes_per_string", bytes_per_string)
        self._min_shard_bytes = min_shard_bytes
        self._max_shards = max_shards
        self._bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int] | torch.Size, dtype: Any, axis: int = 0
                 ) -> list[int]:
        dims = _shape(shape)
        if axis >= len(dims):
            raise UsageError(explain("axis", axis, f"Cannot partition variable along axis "
                                     f"{axis} when shape is only {dims}", "use axis 0"))
        total = math.prod(dims) * _element_size(dtype, self._bytes_per_string)
        result = [1] * len(dims)
        result[axis] = max(1, min(dims[axis], self._max_shards,
                                  int(math.ceil(total / self._min_shard_bytes))))
        return result


class MaxSizePartitioner(Partitioner):
    """As few shards as possible, each at most ``max_shard_bytes`` (``max_shards`` wins).

    Example:
        >>> MaxSizePartitioner(max_shard_bytes=4)((6, 1), torch.float32)
        [6, 1]
    """

    def __init__(self, max_shard_bytes: int, max_shards: int | None = None,
                 bytes_per_string: int = 16) -> None:
        _positive("max_shard_bytes", max_shard_bytes)
        if max_shards is not None:
            _positive("max_shards", max_shards)
        _positive("bytes_per_string", bytes_per_string)
        self._max_shard_bytes = max_shard_bytes
        self._max_shards = max_shards
        self._bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int] | torch.Size, dtype: Any, axis: int = 0
                 ) -> list[int]:
        dims = _shape(shape)
        result = [1] * len(dims)
        if not dims or dims[axis] == 0:
            return result
        per_slice = math.prod(dims) / dims[axis] * _element_size(dtype, self._bytes_per_string)
        slices_per_shard = max(1, math.floor(self._max_shard_bytes / per_slice))
        shards = int(math.ceil(dims[axis] / slices_per_shard))
        result[axis] = min(self._max_shards, shards) if self._max_shards else shards
        return result
