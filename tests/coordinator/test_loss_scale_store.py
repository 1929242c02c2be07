"""The dynamic loss scale a ``ps`` task keeps for every worker (``VariableStore``'s
``LossScale`` method): TensorFlow's rule, applied atomically, and reports of steps
computed at a scale that is no longer current change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from distrib.errors import UsageError
from distrib.rpc import wire
from distrib.rpc.variables import VariableStore


def _call(store: VariableStore, **request: Any) -> tuple[float, int]:
    reply = wire.decode(store.handle("LossScale", wire.encode({"id": 7, **request}), "worker:0"))
    return reply["scale"], reply["counter"]


def test_finite_steps_double_the_scale_every_growth_steps() -> None:
    store = VariableStore()
    assert _call(store, create=[1024.0, 0, 3]) == (1024.0, 0)
    assert [_call(store, used=s, finite=True) for s in (1024.0, 1024.0, 1024.0, 2048.0)] == [
        (1024.0, 1), (1024.0, 2), (2048.0, 0), (2048.0, 1)]


def test_a_step_that_overflowed_halves_the_scale_never_below_one() -> None:
    store = VariableStore()
    _call(store, create=[2.0, 1, 3])
    assert _call(store, used=2.0, finite=False) == (1.0, 0)
    assert _call(store, used=1.0, finite=False) == (1.0, 0)


def test_a_double_that_would_overflow_keeps_the_scale() -> None:
    store = VariableStore()
    _call(store, create=[2.0 ** 1023, 0, 1])
    assert _call(store, used=2.0 ** 1023, finite=True) == (2.0 ** 1023, 0)


def test_a_step_computed_at_another_scale_changes_nothing() -> None:
    # Two workers overflow at 1024: the first halves the scale, the second one's report
    # says nothing about 512 (TensorFlow's racing assignments could halve twice).
    store = VariableStore()
    _call(store, create=[1024.0, 5, 10])
    assert _call(store, used=1024.0, finite=False) == (512.0, 0)
    assert _call(store, used=1024.0, finite=False) == (512.0, 0)
    assert _call(store, used=1024.0, finite=True) == (512.0, 0)


def test_create_keeps_an_existing_scale_and_assign_replaces_it() -> None:
    store = VariableStore()
    _call(store, create=[1024.0, 0, 10])
    _call(store, used=1024.0, finite=False)
    assert _call(store, create=[1024.0, 0, 10]) == (512.0, 0)
    _call(store, assign=[64.0, 3])
    assert _call(store) == (64.0, 3)


def test_an_unknown_scale_is_an_error_that_names_it() -> None:
    with pytest.raises(UsageError, match="loss scale id = 7"):
        _call(VariableStore())
    store = VariableStore()
    _call(store, create=[8.0, 0, 2])
    store.reset()  # a new chief session forgets it
    with pytest.raises(UsageError, match="loss scale id"):
        _call(store)
