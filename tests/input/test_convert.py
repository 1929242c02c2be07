"""as_dataset and the non-Dataset inputs the distribution functions accept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from distrib.data import AutoShardPolicy, Dataset, graph
from distrib.errors import UsageError
from distrib.input import as_dataset, distribute_dataset
from tests.input.helpers import as_lists, global_steps


def test_arrays_with_a_global_batch_size() -> None:
    ds = as_dataset(np.zeros((10, 3)), np.arange(10), batch_size=4)
    assert [y.tolist() for _, y in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert ds.options().experimental_distribute.auto_shard_policy == AutoShardPolicy.DATA
    shuffled = as_dataset({"a": torch.arange(10)}, batch_size=10, shuffle=True, seed=1)
    assert sorted(next(iter(shuffled))["a"].tolist()) == list(range(10))
    assert len(list(as_dataset(np.zeros(70)))) == 3   # Keras' default batch of 32


def test_plain_dataloader_becomes_random_access() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=4, shuffle=True)
    ds = as_dataset(loader, seed=3)
    assert graph.access(ds) == "refs"
    rows = sorted(v for (b,) in ds for v in b.tolist())
    assert rows == list(range(10))
    with pytest.raises(UsageError, match="must not be given"):
        as_dataset(loader, batch_size=4)


def test_a_sampler_that_draws_fewer_rows_keeps_the_loader_as_it_is() -> None:
    sampler = torch.utils.data.RandomSampler(range(10), num_samples=6)
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=4, sampler=sampler)
    ds = as_dataset(loader)
    assert graph.access(ds) != "refs"
    assert [len(b) for (b,) in ds] == [4, 2]


class Stream(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(torch.arange(7))


def test_custom_loaders_and_iterables_are_split_without_duplicates() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=4,
                        collate_fn=lambda rows: torch.stack([r[0] for r in rows]))
    # Each replica reads every batch and keeps its slice: the step count is not provable,
    # so each step is agreed (here each replica agrees with itself).
    per_replica = [[as_lists(b) for b in distribute_dataset(loader, _local(2, r))]
                   for r in range(2)]
    assert sorted(sum(global_steps(per_replica), [])) == list(range(10))
    assert [b.tolist() for b in as_dataset(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5],
                                                                         [6]]


def _local(replicas: int, r: int):  # type: ignore[no-untyped-def]
    from distrib.distribute.group import ReplicaGroupInfo
    return ReplicaGroupInfo(num_replicas_in_sync=replicas, replica_id=r, num_workers=1,
                            local_replicas=replicas, local_replica_id=r)


def test_torch_dataset_with_labels_and_bad_inputs() -> None:
    ds = as_dataset(TensorDataset(torch.arange(4)), torch.arange(4) * 10, batch_size=2)
    ((x,), y) = next(iter(ds))
    assert x.tolist() == [0, 1] and y.tolist() == [0, 10]
    with pytest.raises(UsageError):
        as_dataset(Dataset.range(3), batch_size=2)
    with pytest.raises(UsageError):
        as_dataset(object())


def test_distribute_dataset_asks_for_a_batched_dataset() -> None:
    from tests.input.helpers import fake_group

    with pytest.raises(UsageError, match="as_dataset"):
        distribute_dataset(np.zeros((4, 2)), fake_group(2, 0, 1))
