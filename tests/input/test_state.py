"""Saving and restoring the position of a distributed iterator (in one process)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrib.data import AutoShardPolicy, Dataset, Options, TextLineDataset
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DataError, UsageError
from distrib.input import distribute_dataset, distribute_datasets_from_function
from tests.input.helpers import as_lists, fake_group


def pipeline() -> Dataset:
    return Dataset.from_tensor_slices(torch.arange(30)).shuffle(30, seed=2).batch(4)


def reference(epochs: int) -> list[list[list[int]]]:
    single = distribute_dataset(pipeline(), ReplicaGroupInfo.single())
    return [[as_lists(b) for b in single] for _ in range(epochs)]


def test_restore_mid_epoch_onto_other_layouts() -> None:
    ref = reference(3)
    dists = [distribute_dataset(pipeline(), fake_group(2, r, 2)) for r in range(2)]
    for d in dists:                       # epoch 0
        list(d)
    its = [iter(d) for d in dists]        # epoch 1: three steps
    for step in range(3):
        assert sum((as_lists(next(it)) for it in its), []) == ref[1][step]
    state = its[1].state_dict()
    assert (state["epoch"], state["position"]) == (1, 3)
    for group_views in ([ReplicaGroupInfo.single()],
                        [fake_group(2, r, 1) for r in range(2)],
                        [fake_group(4, r, 2) for r in range(4)]):
        restored = [distribute_dataset(pipeline(), g) for g in group_views]
        for d in restored:
            d.load_state_dict(state)
        for expected_epoch in (ref[1][3:], ref[2]):
            per_replica = [[as_lists(b) for b in d] for d in restored]
            joined = [sorted(sum(step, [])) for step in zip(*per_replica)]
            assert joined == [sorted(b) for b in expected_epoch]


def test_iterator_state_after_the_end_points_at_the_next_epoch() -> None:
    dist = distribute_dataset(pipeline(), ReplicaGroupInfo.single())
    it = iter(dist)
    list(it)
    assert (it.state_dict()["epoch"], it.state_dict()["position"]) == (1, 0)
    it2 = iter(dist)
    next(it2)
    it2.load_state_dict(it.state_dict())
    assert [as_lists(b) for b in it2] == reference(2)[1]


def test_streaming_pipelines_replay_to_the_position() -> None:
    def streamed() -> Dataset:
        return Dataset.range(30).filter(lambda x: True).shuffle(30, seed=2).batch(4)
    full = distribute_dataset(streamed(), ReplicaGroupInfo.single())
    epochs = [[as_lists(b) for b in full] for _ in range(2)]
    dist = distribute_dataset(streamed(), ReplicaGroupInfo.single())
    it = iter(dist)
    next(it), next(it)
    other = distribute_dataset(streamed(), ReplicaGroupInfo.single())
    other.load_state_dict(it.state_dict())
    assert [as_lists(b) for b in other] == epochs[0][2:]
    assert [as_lists(b) for b in other] == epochs[1]


def test_per_worker_positions_need_the_same_layout(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text("1\n2\n3\n")
    ds = TextLineDataset([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]).batch(2)
    group = ReplicaGroupInfo(num_replicas_in_sync=2, replica_id=0, num_workers=2)
    state = iter(distribute_dataset(ds, group)).state_dict()
    assert state["mode"] == "rebatch" and not state["portable"]
    with pytest.raises(DataError, match="same number of workers"):
        distribute_dataset(ds, ReplicaGroupInfo.single()).load_state_dict(state)
    fn = distribute_datasets_from_function(lambda ctx: Dataset.range(4).batch(2),
                                           ReplicaGroupInfo.single())
    with pytest.raises(DataError):
        fn.load_state_dict(state)
    with pytest.raises(UsageError):
        fn.load_state_dict({"epoch": 0})


def test_options_policy_off_positions_are_per_worker() -> None:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    dist = distribute_dataset(Dataset.range(8).batch(4).with_options(opts), fake_group(2, 0, 2))
    it = iter(dist)
    next(it)
    assert it.state_dict()["portable"] is False


def test_rebatched_positions_resume_with_the_same_layout() -> None:
    def dataset() -> Dataset:
        opts = Options()
        opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
        return Dataset.range(23).batch(5).repeat(2).with_options(opts)
    groups = [fake_group(4, r, 2) for r in range(4)]
    full = [[as_lists(b) for b in distribute_dataset(dataset(), g)] for g in groups]
    assert len({len(f) for f in full}) == 1
    its = [iter(distribute_dataset(dataset(), g)) for g in groups]
    for _ in range(3):
        for it in its:
            next(it)
    states = [it.state_dict() for it in its]
    assert {s["mode"] for s in states} == {"rebatch"} and not states[0]["portable"]
    for g, state, expected in zip(groups, states, full):
        restored = distribute_dataset(dataset(), g)
        restored.load_state_dict(state)
        assert [as_lists(b) for b in restored] == expected[3:]
