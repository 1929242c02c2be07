"""experimental_distribute_dataset semantics, every rank's view built in one process.

The groups' collectives raise: in these cases every replica's step count is
provable from the pipeline, so no collective may be needed.  test_golden.py
checks the same functions against TensorFlow 2.21 on a large grid; these tests
name the rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from distrib.data import SHARD_HINT, AutoShardPolicy, Dataset, Options, TextLineDataset
from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.values import PerReplica
from distrib.errors import DataError, UsageError
from distrib.input import (
    InputOptions,
    InputReplicationMode,
    distribute_dataset,
    distribute_datasets_from_function,
)
from tests.input.helpers import as_lists, fake_group, global_steps


def local_group(replicas: int, r: int, workers: int) -> ReplicaGroupInfo:
    """A group whose all-reduce sees only this replica (for pipelines of unknown length,
    where each replica agrees on every step; in one process it agrees with itself)."""
    per = replicas // workers
    return ReplicaGroupInfo(num_replicas_in_sync=replicas, replica_id=r, num_workers=workers,
                            worker_index=r // per, local_replicas=per, local_replica_id=r % per)


def views(ds_fn: Any, replicas: int, workers: int, agree: bool = False) -> list[list[Any]]:
    """Every replica's batches for one epoch (a fresh pipeline per replica, as in SPMD)."""
    make = local_group if agree else fake_group
    return [[as_lists(b) for b in distribute_dataset(ds_fn(), make(replicas, r, workers))]
            for r in range(replicas)]


def with_policy(ds: Dataset, policy: AutoShardPolicy) -> Dataset:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(opts)


def test_each_global_batch_is_split_across_the_replicas() -> None:
    assert views(lambda: Dataset.range(4).batch(2), 2, 1) == [[[0], [2]], [[1], [3]]]
    r0, r1 = views(lambda: Dataset.range(100).batch(10), 2, 1)
    assert r0 == [list(range(i, i + 5)) for i in range(0, 100, 10)]
    assert r1 == [list(range(i + 5, i + 10)) for i in range(0, 100, 10)]


def test_a_partial_global_batch_is_cut_into_ceil_sized_pieces() -> None:
    assert views(lambda: Dataset.range(14).batch(8), 2, 1) == [[[0, 1, 2, 3], [8, 9, 10]],
                                                               [[4, 5, 6, 7], [11, 12, 13]]]
    assert views(lambda: Dataset.range(6).batch(4), 2, 1) == [[[0, 1], [4]], [[2, 3], [5]]]
    # More replicas than rows: the last replicas get empty batches (shape (0,)).
    five = views(lambda: Dataset.range(4).batch(4), 5, 1)
    assert five == [[[0]], [[1]], [[2]], [[3]], [[]]]
    # ceil(4 / 3) = 2 rows a piece: the third piece of every batch is empty.
    assert views(lambda: Dataset.range(8).batch(4), 3, 1) == [[[0, 1], [4, 5]],
                                                              [[2, 3], [6, 7]], [[], []]]


def test_off_policy_on_one_worker_rebatches_across_global_batches() -> None:
    got = views(lambda: with_policy(Dataset.range(14).batch(8), AutoShardPolicy.OFF), 2, 1)
    assert got == [[[0, 1, 2, 3], [8, 9, 10, 11]], [[4, 5, 6, 7], [12, 13]]]
    # A partial batch in the middle of the stream: rows flow into the next batch.
    got = views(lambda: with_policy(Dataset.range(5).batch(3).repeat(2), AutoShardPolicy.OFF),
                2, 1)
    assert got == [[[0, 1], [3, 4], [1, 2], [4]], [[2], [0], [3], []]]


def test_unbatched_dataset_is_rejected() -> None:
    with pytest.raises(ValueError, match="Call the `batch` method on the input Dataset in order "
                                         "to be able to split your input across 2 replicas"):
        distribute_dataset(Dataset.range(4), fake_group(2, 0, 1))
    with pytest.raises(ValueError, match="Call the `batch` method"):
        distribute_dataset(Dataset.range(4), fake_group(4, 0, 2))
    for policy in (AutoShardPolicy.AUTO, AutoShardPolicy.OFF):   # TF 2.21 fails here too
        with pytest.raises(ValueError, match="Call the `batch` method"):
            distribute_dataset(with_policy(Dataset.range(4), policy), fake_group(2, 0, 2))
    # One replica reads any dataset as it is.
    assert [int(x) for x in distribute_dataset(Dataset.range(3), fake_group(1, 0, 1))] == \
        [0, 1, 2]


def test_data_sharding_keeps_a_slice_of_every_global_batch() -> None:
    for policy in (AutoShardPolicy.AUTO, AutoShardPolicy.DATA):
        got = views(lambda p=policy: with_policy(Dataset.range(12).batch(4), p), 2, 2)
        assert got == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]]]


def test_partial_global_batch_on_two_workers() -> None:
    assert views(lambda: Dataset.range(14).batch(8), 2, 2) == [[[0, 1, 2, 3], [8, 9, 10]],
                                                               [[4, 5, 6, 7], [11, 12, 13]]]


def test_data_sharding_with_several_replicas_per_worker() -> None:
    # Pieces of ceil(7/4) = 2 rows; replica (worker i, local j) keeps piece i + 2 j (TF).
    assert views(lambda: Dataset.range(7).batch(7), 4, 2) == [[[0, 1]], [[4, 5]], [[2, 3]],
                                                              [[6]]]


def test_off_policy_every_worker_rebatches_everything() -> None:
    got = views(lambda: with_policy(Dataset.range(12).batch(4), AutoShardPolicy.OFF), 2, 2)
    expected = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert got == [expected, expected]
    # Sizes [4] on each worker, not a split of every global batch: 9 rows take 3 steps.
    got = views(lambda: with_policy(Dataset.range(9).batch(4), AutoShardPolicy.OFF), 2, 2)
    assert got == [[[0, 1], [2, 3], [4, 5], [6, 7], [8]]] * 2
    # Worker sizes [2, 1] and [1, 2]: the workers' step counts differ, the short one
    # gets an empty batch.
    got = views(lambda: with_policy(Dataset.range(5).batch(3), AutoShardPolicy.OFF), 2, 2)
    assert got == [[[0, 1], [2], [3, 4], []], [[0], [1, 2], [3], [4]]]


def write_files(tmp_path: Path, sizes: list[int]) -> list[str]:
    names, start = [], 0
    for k, n in enumerate(sizes):
        path = tmp_path / f"part{k}.txt"
        path.write_text("".join(f"{v}\n" for v in range(start, start + n)))
        names.append(str(path))
        start += n
    return names


def numbers(ds: Dataset) -> Dataset:
    return ds.map(lambda s: torch.tensor(int(s)))


def test_file_policy_shards_files(tmp_path: Path) -> None:
    files = write_files(tmp_path, [6, 6])
    expected = [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]]
    # The step count of a file shard is not provable: each step is agreed.
    identity = [local_group(2, r, 2) for r in range(2)]
    for policy in (AutoShardPolicy.AUTO, AutoShardPolicy.FILE):
        got = [[as_lists(b) for b in distribute_dataset(
            with_policy(numbers(TextLineDataset(files)).batch(4), policy), g)] for g in identity]
        assert got == expected
    listed = (Dataset.list_files(str(tmp_path / "*.txt"), shuffle=True, seed=1)
              .interleave(TextLineDataset, cycle_length=1))
    got = [[as_lists(b) for b in distribute_dataset(numbers(listed).batch(4), g)]
           for g in identity]
    assert sorted(got) == expected


def test_file_policy_needs_a_file_per_worker(tmp_path: Path) -> None:
    files = write_files(tmp_path, [12])
    with pytest.raises(DataError, match="There aren't enough elements in this dataset for each "
                                        "shard to have at least one element"):
        distribute_dataset(numbers(TextLineDataset(files)).batch(4), fake_group(2, 0, 2))
    data = views(lambda: with_policy(numbers(TextLineDataset(files)).batch(4),
                                     AutoShardPolicy.DATA), 2, 2, agree=True)
    assert data == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]]]
    with pytest.raises(DataError, match="unshardable source dataset"):
        distribute_dataset(with_policy(Dataset.range(8).batch(4), AutoShardPolicy.FILE),
                           fake_group(2, 0, 2))


def test_hint_policy_fills_shard_placeholders() -> None:
    def make() -> Dataset:
        return with_policy(Dataset.range(8).shard(SHARD_HINT, SHARD_HINT).batch(2),
                           AutoShardPolicy.HINT)
    groups = [local_group(2, r, 2) for r in range(2)]
    got = [[as_lists(b) for b in distribute_dataset(make(), g)] for g in groups]
    assert got == [[[0], [2], [4], [6]], [[1], [3], [5], [7]]]


def test_partial_batch_handling_is_off_only_for_static_batches_on_one_worker() -> None:
    for drop in (False, True):
        dist = distribute_dataset(Dataset.range(10).batch(4, drop_remainder=drop),
                                  fake_group(2, 0, 1))
        assert iter(dist)._enable_get_next_as_optional == (not drop)


def test_batches_are_wrapped_per_replica_and_on_the_device() -> None:
    group = ReplicaGroupInfo(num_replicas_in_sync=1, wrap_per_replica=True,
                             device=torch.device("cpu"))
    x, y = next(iter(distribute_dataset(
        Dataset.from_tensor_slices((torch.zeros(4, 2), torch.arange(4))).batch(2), group)))
    assert isinstance(x, PerReplica) and x.values[0].shape == (2, 2)
    assert y.values[0].tolist() == [0, 1]


def test_empty_batches_keep_the_element_spec() -> None:
    dist = distribute_dataset(
        Dataset.from_tensor_slices((torch.zeros(3, 5), torch.arange(3))).batch(4),
        fake_group(4, 3, 1))
    ((x, y),) = list(dist)
    assert x.shape == (0, 5) and x.dtype == torch.float32 and y.shape == (0,)


def test_get_next_as_optional_and_element_spec() -> None:
    dist = distribute_dataset(Dataset.range(4).batch(4), fake_group(2, 1, 1))
    it = iter(dist)
    first = it.get_next_as_optional()
    assert first.has_value() and first.get_value().tolist() == [2, 3]
    assert not it.get_next_as_optional().has_value()
    assert dist.element_spec.shape == (None,)
    assert dist.cardinality == 1


def test_from_function_every_lth_batch_per_local_replica() -> None:
    seen = []

    def fn(ctx):  # type: ignore[no-untyped-def]
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return Dataset.range(8).batch(ctx.get_per_replica_batch_size(4))

    got = [[as_lists(b) for b in distribute_datasets_from_function(
        fn, ReplicaGroupInfo(num_replicas_in_sync=2, replica_id=r, num_workers=1,
                             local_replicas=2, local_replica_id=r))] for r in range(2)]
    assert seen == [(1, 0, 2), (1, 0, 2)]
    assert got == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert global_steps(got) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_from_function_per_replica_contexts() -> None:
    seen = []

    def fn(ctx):  # type: ignore[no-untyped-def]
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id))
        return Dataset.range(2)

    opts = InputOptions(experimental_replication_mode=InputReplicationMode.PER_REPLICA)
    for r in range(2):
        distribute_datasets_from_function(
            fn, ReplicaGroupInfo(num_replicas_in_sync=2, replica_id=r, num_workers=1,
                                 local_replicas=2, local_replica_id=r), opts)
    assert seen == [(2, 0), (2, 1)]
    with pytest.raises(UsageError, match="only supported in `distribute_datasets_from_function`"):
        distribute_dataset(Dataset.range(2).batch(2), fake_group(2, 0, 1), opts)
    with pytest.raises(UsageError, match="PER_REPLICA"):
        distribute_dataset(Dataset.range(2).batch(2), fake_group(2, 0, 1),
                           InputOptions(experimental_place_dataset_on_device=True))


def test_one_replica_passes_elements_through() -> None:
    group = ReplicaGroupInfo.single()
    assert [int(x) for x in distribute_dataset(Dataset.range(3), group)] == [0, 1, 2]
    assert [as_lists(b) for b in distribute_dataset(Dataset.range(3).batch(2), group)] == \
        [[0, 1], [2]]


def test_streaming_pipelines_split_like_random_access_ones() -> None:
    streamed = views(lambda: Dataset.range(14).filter(lambda v: True).batch(8)
                     .prefetch(2), 2, 2, agree=True)
    assert streamed == views(lambda: Dataset.range(14).batch(8), 2, 2)
    # Batch-level map: every replica maps the whole global batch, then keeps its rows.
    mapped = views(lambda: Dataset.range(8).batch(4).map(lambda b: b - b.min() - 1), 2, 1)
    assert mapped == [[[-1, 0], [-1, 0]], [[1, 2], [1, 2]]]


def test_infinite_pipelines_are_rebatched_without_agreement() -> None:
    def make() -> Dataset:
        return with_policy(Dataset.range(5).repeat().batch(3), AutoShardPolicy.OFF)
    firsts = []
    for r in range(2):
        it = iter(distribute_dataset(make(), fake_group(2, r, 1)))
        firsts.append([as_lists(next(it)) for _ in range(3)])
    assert firsts == [[[0, 1], [3, 4], [1, 2]], [[2], [0], [3]]]
