"""A torch ``DataLoader`` given to ``fit``/``evaluate``/``predict``: the user's loader, per replica.

What the user configured is kept — ``num_workers`` (and ``worker_init_fn``,
``prefetch_factor``, ``persistent_workers``, ``multiprocessing_context``), ``pin_memory``,
``timeout``, the sampler and the ``collate_fn`` (batches of tuples, lists, dicts or any
structure it returns) — and the batches are split across the replicas by one rule
(docs/input_distribution.md, "A torch DataLoader"):

* a loader over a map-style dataset with a ``batch_size`` (or a ``batch_sampler``): its
  batches are the GLOBAL batches. Every replica iterates the same batches of indices
  (the user's sampler; a random sampler without a generator gets one seeded alike in
  every replica) and loads only its own rows of each — TF's split of a global batch
  (``batch_sizes_for_worker``: a final partial batch fills the replicas in order; a
  replica left without rows gets an empty batch) — through a copy of the user's
  loader over those rows: its workers, its collate, its pinning;
* a loader whose sampler is a ``DistributedSampler`` (the torch habit of sharding per
  rank): its batches are already this replica's, and are used as they are
  (``set_epoch`` is called before every epoch); the sampler must be made for this
  strategy's replicas (``num_replicas`` and ``rank``), else a clear error;
* a loader over an ``IterableDataset``, or without automatic batching
  (``batch_size=None``): every replica iterates the whole loader and keeps its slice
  of every global batch (nothing can be loaded by index).

Example::

    loader = torch.utils.data.DataLoader(train_set, batch_size=64, shuffle=True,
                                         num_workers=4, pin_memory=True)
    model.fit(loader, epochs=5)   # 64 examples a step over all replicas
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from distrib import nest
from distrib.data import AutoShardPolicy, Options
from distrib.data.sources import Generator
from distrib.errors import UsageError, explain
from distrib.input import InputOptions, InputReplicationMode, batch_sizes_for_worker
from distrib.training.input_checks import check_same_arrays

__all__ = ["loader_source", "ReplicaBatches"]

_RANDOM = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def _sampler_of(dl: DataLoader[Any]) -> Any:
    batch_sampler = dl.batch_sampler
    return getattr(batch_sampler, "sampler", None) if batch_sampler is not None \
        else dl.sampler


class ReplicaBatches(Sampler[list[int]]):
    """This replica's rows of every batch of indices ``batches`` yields (TF's split).

    An empty share is yielded as the batch's first index, noted in :attr:`empty` so that
    the loaded batch is cut to zero rows (the structure of a batch, no example).

    Example:
        >>> s = ReplicaBatches([[0, 1, 2], [3]], replica=1, replicas=2)
        >>> list(s), list(s.empty)
        ([[2], [3]], [False, True])
    """

    def __init__(self, batches: Any, replica: int, replicas: int) -> None:
        self.batches = batches
        self.replica = replica
        self.replicas = replicas
        self.empty: collections.deque[bool] = collections.deque()

    def __iter__(self) -> Iterator[list[int]]:
        self.empty.clear()
        for batch in self.batches:
            indices = list(batch)
            sizes = batch_sizes_for_worker(len(indices), 1, self.replicas, 0)
            start = sum(sizes[:self.replica])
            mine = indices[start:start + sizes[self.replica]]
            self.empty.append(not mine)
            yield mine if mine else indices[:1]

    def __len__(self) -> int:
        return len(self.batches)


def _copy(dl: DataLoader[Any], batch_sampler: Sampler[list[int]]) -> DataLoader[Any]:
    """``dl`` with another batch sampler (every other setting kept)."""
    kwargs: dict[str, Any] = {
        "batch_sampler": batch_sampler, "num_workers": dl.num_workers,
        "collate_fn": dl.collate_fn, "pin_memory": dl.pin_memory, "timeout": dl.timeout,
        "worker_init_fn": dl.worker_init_fn,
        "multiprocessing_context": dl.multiprocessing_context, "generator": dl.generator,
        "persistent_workers": dl.persistent_workers,
        "pin_memory_device": dl.pin_memory_device}
    if dl.num_workers > 0:
        kwargs["prefetch_factor"] = dl.prefetch_factor
    return DataLoader(dl.dataset, **kwargs)  # in order: the empty shares are noted in order


def _structure(batch: Any) -> Any:
    """A collated batch with its lists as tuples: ``default_collate`` returns the fields
    of a tuple element as a list, which a ``Dataset`` would take for one array."""
    if isinstance(batch, list):
        return tuple(_structure(v) for v in batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_structure(v) for v in batch))
    if isinstance(batch, tuple):
        return tuple(_structure(v) for v in batch)
    if isinstance(batch, dict):
        return {k: _structure(v) for k, v in batch.items()}
    return batch


def _batches(loader: DataLoader[Any]) -> Iterator[Any]:
    for batch in loader:
        yield _structure(batch)


def _zero_rows(batch: Any) -> Any:
    return nest.map_structure(
        lambda t: t[:0] if isinstance(t, torch.Tensor) and t.dim() > 0 else t, batch)


def _per_replica_batches(loader: DataLoader[Any], shares: ReplicaBatches) -> Iterator[Any]:
    for batch in _batches(loader):
        yield _zero_rows(batch) if shares.empty.popleft() else batch


def _seed_random_sampler(sampler: Any, seed: int) -> None:
    """Give a random sampler without a generator one seeded alike in every replica."""
    if isinstance(sampler, _RANDOM) and getattr(sampler, "generator", None) is None:
        sampler.generator = torch.Generator().manual_seed(seed)


def _per_replica(strategy: Any, make: Any) -> Any:
    options = InputOptions(experimental_replication_mode=InputReplicationMode.PER_REPLICA)
    return strategy.distribute_datasets_from_function(
        lambda ctx: Generator(make, batched=True), options)


def _check_distributed_sampler(sampler: DistributedSampler[Any], replicas: int,
                               replica: int) -> None:
    if sampler.num_replicas != replicas or sampler.rank != replica:
        raise UsageError(explain(
            "DataLoader sampler", f"DistributedSampler(num_replicas={sampler.num_replicas}, "
            f"rank={sampler.rank})",
            f"this replica is {replica} of {replicas}: a DistributedSampler shards the data "
            "per replica, and must be made for the strategy's replicas",
            "drop the DistributedSampler (distrib splits every batch of a plain DataLoader "
            "across the replicas), or make it with num_replicas=strategy.num_replicas_in_sync "
            "and rank=the replica's id"))


def _check_same_items(strategy: Any, dataset: Any) -> None:
    """Every replica process builds the loader's dataset itself, and each loads only its
    rows of a global batch: the same dataset everywhere is checked on its first, last and
    7 evenly spread items (one all-gather of their checksums), as in-memory arrays are."""
    try:
        n = len(dataset)
    except TypeError:
        return  # no length: nothing to pick by index
    picks = sorted({0, n - 1, *(n * k // 8 for k in range(1, 8))}) if n else []

    def arrays(item: Any) -> Any:
        return nest.map_structure(
            lambda v: np.asarray(v) if isinstance(v, (bool, int, float)) else v, item)
    check_same_arrays(strategy, {f"dataset[{i}]": arrays(dataset[i]) for i in picks},
                      what="DataLoader dataset items")


def loader_source(dl: DataLoader[Any], strategy: Any, seed: int) -> Any:
    """The input ``DataHandler`` distributes for ``dl``: a ``Dataset`` of global batches
    (split across the replicas by the strategy) or this replica's batches, distributed.
    """
    group = strategy.extended.replica_group
    replicas, replica = strategy.num_replicas_in_sync, group.replica_id
    if replicas > 1 and not isinstance(dl.dataset, IterableDataset):
        _check_same_items(strategy, dl.dataset)
    sampler = _sampler_of(dl)
    if isinstance(sampler, DistributedSampler):
        _check_distributed_sampler(sampler, replicas, replica)
        epochs = [0]

        def epoch_batches() -> Iterator[Any]:
            sampler.set_epoch(epochs[0])
            epochs[0] += 1
            return _batches(dl)
        if replicas == 1:
            return Generator(epoch_batches, batched=True)
        return _per_replica(strategy, epoch_batches)
    _seed_random_sampler(sampler, seed)
    if replicas == 1 or dl.batch_sampler is None or isinstance(dl.dataset, IterableDataset):
        options = Options()  # every worker reads the whole loader and keeps its slices
        options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
        return Generator(lambda: _batches(dl), batched=True).with_options(options)
    shares = ReplicaBatches(dl.batch_sampler, replica, replicas)
    mine = _copy(dl, shares)
    return _per_replica(strategy, lambda: _per_replica_batches(mine, shares))
