"""The modules a scope recorded, in one process (tests/strategies/test_multi_replica_semantics.py
runs the agreement between two real replicas)."""

from __future__ import annotations

import gc

import torch
from torch import nn

from distrib.strategies._scope_tracker import ModuleTracker, untracked


def test_roots_are_the_outermost_modules_in_creation_order() -> None:
    tracker = ModuleTracker()
    tracker.start()
    first = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    second = nn.Linear(2, 1)
    assert tracker.stop() == [first, second]


def test_modules_built_in_untracked_are_not_recorded() -> None:
    tracker = ModuleTracker()
    tracker.start()
    net = nn.Linear(2, 2)
    with untracked():
        nn.ParameterList(list(net.parameters()))
    assert tracker.stop() == [net]


def test_a_module_freed_locally_is_forgotten() -> None:
    tracker = ModuleTracker()
    tracker.start()
    kept = nn.Linear(2, 2)
    dropped = nn.Linear(2, 2)
    dropped.__dict__["me"] = dropped  # a cycle: freed by the collection below
    del dropped
    gc.collect()
    assert tracker.stop() == [kept]


def test_only_modules_alive_on_every_replica_are_roots() -> None:
    # Another replica whose collector already freed this one's second Linear: it reports
    # the first Linear's key alone.  The gather function stands in for the replica
    # group's all-gather (which concatenates every replica's [count, keys...]).
    tracker = ModuleTracker()
    tracker.start()
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    seen: list[torch.Tensor] = []

    def gather_with_other(mine: torch.Tensor, axis: int) -> torch.Tensor:
        seen.append(mine)
        other = torch.tensor([1, int(mine[1])])  # the other replica: a's key only
        return torch.cat([mine, other], axis)

    assert tracker.roots(gather_with_other) == [a]
    assert seen[0][0].item() == 2  # this replica reported both
    assert tracker.stop() == [a, b]  # without agreement: both are alive here


def _keys_of_a_program() -> list[int]:
    tracker = ModuleTracker()
    tracker.start()
    modules = [nn.Linear(2, 2), nn.Conv1d(1, 1, 1), nn.Linear(2, 2)]
    reported: list[torch.Tensor] = []

    def gather_alone(mine: torch.Tensor, axis: int) -> torch.Tensor:
        reported.append(mine)
        return mine

    assert tracker.roots(gather_alone) == modules
    tracker.stop()
    return [int(k) for k in reported[0]]


def test_keys_follow_the_class_and_its_count_not_the_object() -> None:
    # Two trackers recording the same program give the same keys (each replica is one).
    first, second = _keys_of_a_program(), _keys_of_a_program()
    assert first == second and first[0] == 3 and len(set(first[1:])) == 3
