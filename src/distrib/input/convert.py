"""``as_dataset``: arrays, tensors, torch datasets and DataLoaders as a ``Dataset``.

Keras-style ``fit(x, y, batch_size=...)`` and the distribution functions accept
more than ``distrib.data.Dataset``: numpy arrays and tensors (batched by the
global ``batch_size``), map-style or iterable torch datasets, and DataLoaders
(whose ``batch_size`` is the global batch).  A plain DataLoader over a
map-style dataset with the default collate becomes a random-access pipeline;
any other DataLoader streams its batches, and each replica keeps its slice of
every batch, so no sample is duplicated or dropped.  Array inputs use DATA
auto-sharding, as Keras does.

Example:
    >>> import numpy as np
    >>> ds = as_dataset(np.zeros((10, 3)), np.arange(10), batch_size=4)
    >>> [tuple(x.shape) for x, y in ds]
    [(4, 3), (4, 3), (2, 3)]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.data import AutoShardPolicy, Dataset, Options
from distrib.data.sources import Generator
from distrib.errors import UsageError, explain

__all__ = ["as_dataset", "DEFAULT_BATCH_SIZE"]

DEFAULT_BATCH_SIZE = 32
"""Keras' default ``batch_size`` for array inputs."""


def _data_sharded(ds: Dataset) -> Dataset:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    return ds.with_options(opts)


def _is_arrays(x: Any) -> bool:
    return all(isinstance(v, (torch.Tensor, np.ndarray, list))
               for v in nest.flatten(x, lists_are_leaves=True))


def _loader(dl: Any, seed: int | None) -> Dataset:
    from torch.utils.data import (
        IterableDataset,
        RandomSampler,
        SequentialSampler,
        default_collate,
    )

    plain = (dl.batch_size is not None and not isinstance(dl.dataset, IterableDataset)
             and dl.collate_fn is default_collate
             and type(dl.sampler) in (SequentialSampler, RandomSampler)
             and not getattr(dl.sampler, "replacement", False)
             and getattr(dl.sampler, "num_samples", len(dl.dataset)) == len(dl.dataset))
    if plain:
        ds = Dataset.from_torch(dl.dataset)
        if isinstance(dl.sampler, RandomSampler):
            ds = ds.shuffle(len(dl.dataset), seed=seed)
        return _data_sharded(ds.batch(dl.batch_size, drop_remainder=dl.drop_last))
    return _data_sharded(Generator(lambda: iter(dl), batched=True))


def as_dataset(x: Any, y: Any = None, batch_size: int | None = None, shuffle: bool = False,
               seed: int | None = None) -> Dataset:
    """Turn ``x`` (and labels ``y``) into a batched ``distrib.data.Dataset``.

    Args:
        x: a ``Dataset`` (returned as is), arrays/tensors (or a tuple/dict of
            them), a map-style or iterable torch ``Dataset``, or a ``DataLoader``.
        y: labels for array or torch-dataset ``x``; elements become ``(x, y)``.
        batch_size: the GLOBAL batch size for arrays and torch datasets
            (default 32); must not be given for a ``Dataset`` or ``DataLoader``,
            which are batched already.
        shuffle: shuffle arrays/torch datasets every epoch (a full shuffle).
        seed: the shuffle seed (default: the run seed every replica shares).

    Example:
        >>> loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(6)),
        ...                                      batch_size=4)
        >>> [b[0].tolist() for b in as_dataset(loader)]
        [[0, 1, 2, 3], [4, 5]]
    """
    from torch.utils.data import DataLoader, IterableDataset
    from torch.utils.data import Dataset as TorchDataset

    if isinstance(x, (Dataset, DataLoader)):
        if batch_size is not None or y is not None:
            raise UsageError(explain(
                "batch_size" if batch_size is not None else "y",
                batch_size if batch_size is not None else type(y).__name__,
                f"must not be given with a {type(x).__name__}, which yields batches already",
                "batch the dataset itself (dataset.batch(global_batch_size)) and pass only it"))
        return x if isinstance(x, Dataset) else _loader(x, seed)
    size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    if isinstance(x, IterableDataset):
        if y is not None:
            raise UsageError(explain("y", type(y).__name__,
                                     "must not be given with an IterableDataset",
                                     "yield (x, y) pairs from the dataset"))
        return _data_sharded(Generator(lambda: iter(x)).batch(size))
    if isinstance(x, TorchDataset) and not _is_arrays(x):
        ds = Dataset.from_torch(x)
        if y is not None:
            ds = Dataset.zip(ds, Dataset.from_tensor_slices(y))
    elif _is_arrays(x):
        ds = Dataset.from_tensor_slices(x if y is None else (x, y))
    else:
        raise UsageError(explain(
            "x", type(x).__name__,
            "must be a distrib.data.Dataset, arrays or tensors, a torch Dataset or a DataLoader",
            "convert the input with distrib.data.Dataset.from_tensor_slices or from_generator"))
    if shuffle:
        ds = ds.shuffle(int(ds.cardinality()), seed=seed)
    return _data_sharded(ds.batch(size))
