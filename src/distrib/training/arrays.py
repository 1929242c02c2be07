"""In-memory arrays as the input of ``fit``/``evaluate``/``predict``, and Keras' input cast.

Arrays — numpy arrays, torch tensors, or tuples/dicts of them — are cut into global
batches and each replica slices its own rows of each (TF's split of a global batch,
``batch_sizes_for_worker``), in the training thread, with no copy when not shuffled;
every replica draws the same shuffled order.  Features are cast as Keras casts them:
floating values and ``uint8`` images to the model's dtype; other integers (token ids)
and every label stay as they are.

Example:
    >>> import numpy as np
    >>> (tx,), (vx,) = split_arrays((np.arange(10),), 0.2)
    >>> tx.tolist(), vx.tolist()
    ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import UsageError, explain
from distrib.input import batch_sizes_for_worker
from distrib.training.structure import unpack_x_y_sample_weight

__all__ = ["ArraySource", "is_array_like", "num_examples", "split_arrays", "cast_batch",
           "replica_rows"]


def is_array_like(value: Any) -> bool:
    """Whether ``value`` is an array, a tensor, or a tuple/list/dict of them.

    Example:
        >>> is_array_like((np.zeros(2), torch.zeros(2))), is_array_like([1, 2])
        (True, False)
    """
    leaves = nest.flatten(value)
    return bool(leaves) and all(isinstance(x, (np.ndarray, torch.Tensor)) for x in leaves)


def _leaves(value: Any) -> list[Any]:
    return [x for x in nest.flatten(value) if x is not None]


def num_examples(*values: Any) -> int:
    """The common first dimension of every array in ``values`` (error if they differ)."""
    sizes = {int(a.shape[0]) for v in values for a in _leaves(v)}
    if len(sizes) != 1:
        raise UsageError(explain("input sizes", sorted(sizes), "Data cardinality is ambiguous: "
                                 "x, y and sample_weight must have the same number of "
                                 "samples", "make every array hold one row per example"))
    return sizes.pop()


def _take(value: Any, index: slice | np.ndarray | torch.Tensor) -> Any:
    return nest.map_structure(lambda v: None if v is None else v[index], value)


def split_arrays(values: tuple[Any, ...], validation_split: float
                 ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Keras' ``validation_split``: the LAST fraction of the examples, before shuffling.

    Example:
        >>> (tx,), (vx,) = split_arrays((np.arange(10),), 0.2)
        >>> tx.tolist(), vx.tolist()
        ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
    """
    if not 0.0 < validation_split < 1.0:
        raise UsageError(explain("validation_split", validation_split, "must be in (0, 1)",
                                 "pass e.g. 0.2"))
    n = num_examples(*values)
    split_at = int(math.floor(n * (1.0 - validation_split)))
    if split_at == 0 or split_at == n:
        raise UsageError(explain("validation_split", validation_split,
                                 f"Training data contains {n} samples, which is not sufficient "
                                 f"to split it into a validation and training set as specified "
                                 f"by `validation_split={validation_split}`",
                                 "provide more data or a different value"))
    return (tuple(_take(v, slice(0, split_at)) for v in values),
            tuple(_take(v, slice(split_at, n)) for v in values))


def _cast(t: torch.Tensor, float_dtype: torch.dtype | None, feature: bool) -> torch.Tensor:
    """Keras' input cast: floating values, and uint8 features (images), to the model's dtype."""
    if float_dtype is not None and t.dtype != float_dtype and (
            t.is_floating_point() or (feature and t.dtype == torch.uint8)):
        return t.to(float_dtype)
    return t


def _as_tensors(value: Any, float_dtype: torch.dtype | None) -> Any:
    """``(x, y, ...)`` as tensors: floating arrays and uint8 features in ``float_dtype``."""
    def convert(v: Any, feature: bool) -> Any:
        if v is None:
            return None
        t = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
        return _cast(t, float_dtype, feature)
    return tuple(nest.map_structure(lambda v, i=i: convert(v, i == 0), part)
                 for i, part in enumerate(value))


def cast_batch(data: Any, device: torch.device, float_dtype: torch.dtype | None) -> Any:
    """A batch on ``device`` with Keras' input cast (floating values, and uint8 features, to ``float_dtype``).

    Example:
        >>> x, y = cast_batch((np.zeros((1, 2), np.uint8), np.ones(1, np.int64)),
        ...                   torch.device("cpu"), torch.float32)
        >>> x.dtype, y.dtype
        (torch.float32, torch.int64)
    """
    def move(v: Any, feature: bool) -> Any:
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(v)
        if not isinstance(v, torch.Tensor):
            return v
        v = _cast(v, float_dtype, feature)
        return v.to(device) if v.device != device else v
    x, y, w = unpack_x_y_sample_weight(data)
    if y is None and w is None and not (isinstance(data, (tuple, list)) and len(data) == 1):
        return nest.map_structure(lambda v: move(v, True), data)
    parts = [nest.map_structure(lambda v, i=i: move(v, i == 0), part)
             for i, part in enumerate(data)]
    return tuple(parts) if isinstance(data, tuple) else parts


def replica_rows(size: int, global_batch: int, replicas: int, replica_id: int
                 ) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of a global batch of ``size`` rows that replica ``replica_id`` takes.

    TF's split of a global batch (``batch_sizes_for_worker``): sizes differ by at
    most one; a final partial batch fills the replicas in order.

    Example:
        >>> [replica_rows(6, 8, 2, r) for r in range(2)]   # a final 6 of 8: 4 + 2
        [(0, 4), (4, 6)]
    """
    sizes = batch_sizes_for_worker(global_batch, 1, replicas, 0)
    start = sum(sizes[:replica_id])
    return min(start, size), min(start + sizes[replica_id], size)


class ArraySource:
    """This replica's batches of in-memory arrays, sliced in the calling thread."""

    def __init__(self, data: tuple[Any, ...], batch_size: int, shuffle: bool, seed: int,
                 group: ReplicaGroupInfo, float_dtype: torch.dtype | None) -> None:
        self._data = _as_tensors(data, float_dtype)
        self._n = num_examples(*data)
        self._batch = batch_size
        self._shuffle = shuffle
        self._seed = seed
        self._group = group
        self._epoch = 0
        self._skip = 0
        self.device = group.device

    def __len__(self) -> int:
        return math.ceil(self._n / self._batch)

    def start_at(self, epoch: int, batch: int, seed: int) -> None:
        """Make the next iterator the pass ``epoch`` of the data, from global batch ``batch``."""
        self._epoch, self._skip, self._seed = epoch, batch, seed

    def first_row(self) -> Any:
        """The first example as a one-row batch (its structure, shapes and dtypes)."""
        return _take(self._data, slice(0, 1))

    @property
    def position(self) -> tuple[int, int]:
        """``(epochs started, shuffle seed)``."""
        return self._epoch, self._seed

    def __iter__(self) -> Iterator[Any]:
        order: torch.Tensor | None = None
        if self._shuffle and self._n:
            g = torch.Generator().manual_seed(self._seed * 1_000_003 + self._epoch)
            order = torch.randperm(self._n, generator=g)
        self._epoch += 1
        g_size, r, rid = self._batch, self._group.num_replicas_in_sync, self._group.replica_id
        device = self._group.device
        place, on_cpu = self._group.place_batch, device.type == "cpu"
        first, self._skip = self._skip * g_size, 0
        data, n = self._data, self._n
        flat = all(type(v) is torch.Tensor for v in data)  # (x, y): slice without a nest walk
        pair = flat and len(data) == 2
        full = replica_rows(g_size, g_size, r, rid)  # this replica's rows of a full batch
        for start in range(first, n, g_size):
            lo, hi = full if n - start >= g_size else \
                replica_rows(n - start, g_size, r, rid)
            index: slice | torch.Tensor = slice(start + lo, start + hi)
            if order is not None:
                index = order[start + lo:start + hi]
            if pair:  # (x, y), the common case, without a loop
                batch = (data[0][index], data[1][index])
            else:
                batch = tuple([v[index] for v in data]) if flat else _take(data, index)
            if place is not None:
                yield place(batch)
            else:
                yield batch if on_cpu else _to(batch, device)


def _to(value: Any, device: torch.device) -> Any:
    return nest.map_structure(
        lambda v: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v, value)
