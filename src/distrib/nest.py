"""Nested structures, as ``tf.nest`` treats them, on one tree library (optree).

Every part of distrib that walks a structure of values — the arguments and results of
``strategy.run``, the values given to ``reduce``/``gather``/``all_reduce``, the batches
and outputs of ``fit``/``evaluate``/``predict``, the elements of a dataset — does it
through this module, so one rule holds everywhere:

* tuples, namedtuples, lists and dicts are structures; dict keys are visited in sorted
  order (as ``tf.nest`` does); everything else (tensors, arrays, numbers, strings,
  ``None``) is a leaf;
* with ``lists_are_leaves=True`` a Python ``list`` is a leaf — ``tf.data``'s rule, where
  ``from_tensor_slices([1, 2, 3])`` slices one tensor rather than three.

Rebuilding keeps the container types: a namedtuple comes back as the same namedtuple, an
``OrderedDict`` as an ``OrderedDict``.

Example:
    >>> flatten({"b": 1, "a": (2, [3, None])})
    [2, 3, None, 1]
    >>> map_structure(lambda x: x * 10, {"b": 1, "a": (2, 3)})
    {'b': 10, 'a': (20, 30)}
    >>> flatten([1, [2, 3]], lists_are_leaves=True)
    [[1, [2, 3]]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree

from distrib.errors import UsageError, explain

__all__ = ["flatten", "tree_flatten", "tree_unflatten", "pack_sequence_as", "map_structure",
           "assert_same_structure", "is_nested", "TreeSpec", "Nest"]

TreeSpec = optree.PyTreeSpec
#: A value of any structure this module walks: a tensor, array, number, string or
#: ``None``, or tuples, lists and dicts of them (a batch, ``strategy.run``'s arguments
#: and results, a ``model_fn``'s features).  Its leaves are the user's, so any type.
Nest = Any
_NAMESPACE = "distrib"


def _list_leaf(x: Any) -> bool:
    return isinstance(x, list)


def _is_leaf(lists_are_leaves: bool) -> Callable[[Any], bool] | None:
    return _list_leaf if lists_are_leaves else None


def tree_flatten(structure: Any, *, lists_are_leaves: bool = False
                 ) -> tuple[list[Any], TreeSpec]:
    """The leaves of ``structure`` and a spec that :func:`tree_unflatten` rebuilds it from.

    Example:
        >>> leaves, spec = tree_flatten({"a": 1, "b": (2, 3)})
        >>> leaves, tree_unflatten(spec, [10, 20, 30])
        ([1, 2, 3], {'a': 10, 'b': (20, 30)})
    """
    leaves, spec = optree.tree_flatten(structure, is_leaf=_is_leaf(lists_are_leaves),
                                       none_is_leaf=True, namespace=_NAMESPACE)
    return leaves, spec


def tree_unflatten(spec: TreeSpec, leaves: Any) -> Any:
    """Rebuild the structure described by ``spec`` from ``leaves`` (see :func:`tree_flatten`)."""
    return optree.tree_unflatten(spec, leaves)


def flatten(structure: Any, *, lists_are_leaves: bool = False) -> list[Any]:
    """The leaves of ``structure`` in a fixed order (``tf.nest.flatten``).

    Example:
        >>> flatten({"b": 1, "a": (2, 3)})
        [2, 3, 1]
    """
    return tree_flatten(structure, lists_are_leaves=lists_are_leaves)[0]


def pack_sequence_as(structure: Any, flat_sequence: Any, *,
                     lists_are_leaves: bool = False) -> Any:
    """``flat_sequence`` packed into the shape of ``structure`` (``tf.nest.pack_sequence_as``).

    Example:
        >>> pack_sequence_as((0, {"k": 0}), [1, 2])
        (1, {'k': 2})
    """
    _, spec = tree_flatten(structure, lists_are_leaves=lists_are_leaves)
    flat = list(flat_sequence)
    if len(flat) != spec.num_leaves:
        raise UsageError(explain("flat_sequence", f"{len(flat)} values",
                                 f"the structure has {spec.num_leaves} leaves",
                                 "pass exactly one value per leaf"))
    return spec.unflatten(flat)


def map_structure(fn: Callable[..., Any], structure: Any, *rest: Any,
                  lists_are_leaves: bool = False) -> Any:
    """``fn`` applied to corresponding leaves of structures of the same shape.

    Example:
        >>> map_structure(lambda a, b: a + b, (1, {"k": 2}), (10, {"k": 20}))
        (11, {'k': 22})
    """
    if rest:
        for other in rest:
            assert_same_structure(structure, other, lists_are_leaves=lists_are_leaves)
    return optree.tree_map(fn, structure, *rest, is_leaf=_is_leaf(lists_are_leaves),
                           none_is_leaf=True, namespace=_NAMESPACE)


def is_nested(value: Any, *, lists_are_leaves: bool = False) -> bool:
    """Whether ``value`` is a structure rather than a leaf.

    Example:
        >>> is_nested((1,)), is_nested([1], lists_are_leaves=True), is_nested(1)
        (True, False, False)
    """
    _, spec = tree_flatten(value, lists_are_leaves=lists_are_leaves)
    return not spec.is_leaf()


def describe(structure: Any, *, lists_are_leaves: bool = False) -> str:
    """A short text of the structure with leaf types, for error messages.

    Example:
        >>> describe({"x": 1, "y": (2.0, "a")})
        "{'x': int, 'y': (float, str)}"
    """
    leaves, spec = tree_flatten(structure, lists_are_leaves=lists_are_leaves)
    return str(spec.unflatten([_Type(type(x).__name__) for x in leaves]))


class _Type(str):
    def __repr__(self) -> str:
        return str(self)


def assert_same_structure(first: Any, second: Any, *, lists_are_leaves: bool = False,
                          what: str = "structure") -> None:
    """Raise :class:`~distrib.errors.UsageError` unless both have the same structure.

    Container types must match too (a tuple is not a list; namedtuples by class).

    Example:
        >>> assert_same_structure((1, {"k": 2}), (3, {"k": 4}))
    """
    _, a = tree_flatten(first, lists_are_leaves=lists_are_leaves)
    _, b = tree_flatten(second, lists_are_leaves=lists_are_leaves)
    if a != b:
        raise UsageError(explain(
            what, describe(second, lists_are_leaves=lists_are_leaves),
            "must have the same nested structure as "
            f"{describe(first, lists_are_leaves=lists_are_leaves)}",
            "return the same tuple/list/dict layout (same keys, same lengths) every time"))
