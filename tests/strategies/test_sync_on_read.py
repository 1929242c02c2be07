"""Which SyncOnRead values a strategy sums, and how long it holds them (in one process).

The multi-replica case, a metric freed at different moments on two replicas, runs in
tests/strategies/programs/semantics.py.
"""

from __future__ import annotations

import gc

import torch

from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.sync_on_read import SyncOnReadGroup


class Total:
    """A value with a state of two numbers, made lazily as a metric's is."""

    def __init__(self) -> None:
        self.state: torch.Tensor | None = None
        self.total: torch.Tensor | None = None

    def local_state(self) -> torch.Tensor:
        assert self.state is not None, "no state yet"
        return self.state

    def set_global_state(self, total: torch.Tensor) -> None:
        self.total = total.clone()


def test_a_value_is_held_until_its_state_is_sized_then_freed_with_the_program() -> None:
    group = SyncOnReadGroup(ReplicaGroupInfo.single())
    value = Total()
    group.register(value)  # no state yet: its place cannot be sized
    del value
    gc.collect()
    assert len(group) == 1  # held: every replica keeps a place of the same size
    kept = Total()
    group.register(kept)
    kept.state = torch.ones(2, dtype=torch.float64)
    group.settle(kept)  # sized now: held weakly
    del kept
    gc.collect()
    assert len(group) == 1  # only the first, still unsized


def test_synchronize_sizes_the_held_values_and_drops_the_freed_ones() -> None:
    group = SyncOnReadGroup(ReplicaGroupInfo.single())
    first, second = Total(), Total()
    for value in (first, second):
        value.state = torch.tensor([1.0, 2.0], dtype=torch.float64)
        group.register(value)
    group.synchronize()
    assert first.total is not None and first.total.tolist() == [1.0, 2.0]
    del second, value
    gc.collect()
    group.synchronize()  # one replica: freed here is freed everywhere
    assert len(group) == 1
    group.synchronize()
    assert first.total.tolist() == [1.0, 2.0]
