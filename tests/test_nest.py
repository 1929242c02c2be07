"""distrib.nest: one structure rule (tf.nest's) everywhere, and tf.data's list rule."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch

from distrib import nest
from distrib.errors import UsageError

Point = collections.namedtuple("Point", "x y")


def test_dict_keys_are_visited_sorted_and_rebuilt_in_their_order() -> None:
    value = {"b": 1, "a": 2}
    assert nest.flatten(value) == [2, 1]
    assert list(nest.map_structure(lambda v: v, value)) == ["b", "a"]


def test_namedtuples_lists_and_none_round_trip() -> None:
    value: Any = Point(x=[1, None], y={"k": (2, 3)})
    leaves, spec = nest.tree_flatten(value)
    assert leaves == [1, None, 2, 3]
    rebuilt = nest.tree_unflatten(spec, [v * 10 if v else v for v in leaves])
    assert rebuilt == Point(x=[10, None], y={"k": (20, 30)})
    assert type(rebuilt) is Point


def test_lists_are_leaves_under_the_data_rule() -> None:
    assert nest.flatten(([1, 2], {"k": [3]}), lists_are_leaves=True) == [[1, 2], [3]]
    assert not nest.is_nested([1, 2], lists_are_leaves=True)
    assert nest.is_nested([1, 2])


def test_tensors_are_leaves() -> None:
    t = torch.ones(2, 2)
    assert nest.flatten((t,))[0] is t


def test_map_structure_over_two_structures() -> None:
    assert nest.map_structure(lambda a, b: a + b, Point(1, 2), Point(10, 20)) == Point(11, 22)


@pytest.mark.parametrize("a, b", [({"a": 1}, {"b": 1}), ((1, 2), (1, 2, 3)), ((1,), [1]),
                                  (Point(1, 2), (1, 2))])
def test_different_structures_raise_naming_both(a: Any, b: Any) -> None:
    with pytest.raises(UsageError, match="must have the same nested structure"):
        nest.assert_same_structure(a, b)


def test_pack_sequence_as_checks_the_count() -> None:
    assert nest.pack_sequence_as((0, [0]), [1, 2]) == (1, [2])
    with pytest.raises(UsageError, match="3 values"):
        nest.pack_sequence_as((0, [0]), [1, 2, 3])
