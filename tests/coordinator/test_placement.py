"""Partitioners and round-robin placement: TensorFlow's rules, as plain functions."""

from __future__ import annotations

import pytest
import torch

import distrib
from distrib.rpc.placement import Placer, split_rows


def test_thirteen_rows_on_five_shards_split_three_three_three_two_two() -> None:
    placer = Placer(num_ps=2, partitioner=distrib.FixedShardsPartitioner(5))
    var = placer.place("emb", (13, 4), torch.float32)
    assert [s.rows for s in var.shards] == [(0, 3), (3, 6), (6, 9), (9, 11), (11, 13)]
    assert [s.name for s in var.shards] == [f"emb/part_{i}" for i in range(5)]
    assert split_rows(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_four_variables_on_three_ps_go_round_robin() -> None:
    placer = Placer(num_ps=3)
    assert [placer.place(f"v{i}", (2,), torch.float32).tasks for i in range(4)] == \
        [[0], [1], [2], [0]]


def test_shards_take_round_robin_slots_and_rank0_is_never_split() -> None:
    placer = Placer(num_ps=2, partitioner=distrib.FixedShardsPartitioner(3))
    assert placer.place("scalar", (), torch.float32).tasks == [0]
    assert placer.place("w", (7, 2), torch.float32).tasks == [1, 0, 1]
    assert placer.place("few rows", (2, 9), torch.float32).tasks == [0, 1]  # min(3, rows)


def test_tf_partitioner_examples() -> None:
    f32 = torch.float32
    assert distrib.FixedShardsPartitioner(2)((10, 3), f32) == [2, 1]
    assert distrib.MinSizePartitioner(min_shard_bytes=4, max_shards=2)((6, 1), f32) == [2, 1]
    assert distrib.MinSizePartitioner(min_shard_bytes=4, max_shards=10)((6, 1), f32) == [6, 1]
    assert distrib.MaxSizePartitioner(max_shard_bytes=4)((6, 1), f32) == [6, 1]
    assert distrib.MaxSizePartitioner(max_shard_bytes=4, max_shards=2)((6, 1), f32) == [2, 1]
    assert distrib.MaxSizePartitioner(max_shard_bytes=1024)((6, 1), f32) == [1, 1]


def test_a_partitioner_that_splits_another_axis_is_refused_with_tf_words() -> None:
    placer = Placer(num_ps=1, partitioner=lambda shape, dtype: [1, 2])
    with pytest.raises(ValueError, match="elements are 1 besides the first element"):
        placer.place("w", (4, 4), torch.float32)
    with pytest.raises(ValueError, match="must be positive"):
        distrib.MinSizePartitioner(max_shards=0)
