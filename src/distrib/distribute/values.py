"""Distributed values: :class:`PerReplica` and :class:`Mirrored`.

With one process per replica, a distributed value holds the values of *this
process's* replicas (one), exactly as TF's ``MultiWorkerMirroredStrategy`` holds
only the local replicas of each worker.  ``strategy.run`` unwraps them for the
replica function and wraps its results again.

Example:
    >>> v = PerReplica((torch.tensor([1.0, 2.0]),))
    >>> v.values, unwrap(v)
    ((tensor([1., 2.]),), tensor([1., 2.]))
"""

from __future__ import annotations

from typing import Any

import torch

from distrib.nest import flatten, map_structure

__all__ = ["DistributedValues", "PerReplica", "Mirrored", "unwrap", "wrap_nest",
           "local_results", "is_distributed"]


class DistributedValues:
    """Base class: a value with one component per local replica."""

    def __init__(self, values: tuple[Any, ...]) -> None:
        if not isinstance(values, tuple):
            values = tuple(values)
        self._values = values

    @property
    def values(self) -> tuple[Any, ...]:
        """The components, one per local replica of this process."""
        return self._values

    def _primary(self) -> Any:
        return self._values[0]

    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{\n{body}\n}}"

    # Tensor-like conveniences on the primary component.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._values[0], name)


class PerReplica(DistributedValues):
    """Values that may differ between replicas (batches, per-replica results)."""


class Mirrored(DistributedValues):
    """Values known to be identical on every replica (safe to read anywhere)."""


def is_distributed(value: Any) -> bool:
    """Whether ``value`` is a :class:`DistributedValues`."""
    return isinstance(value, DistributedValues)


def unwrap(value: Any, index: int = 0) -> Any:
    """Replace every distributed value in a nest by its ``index``-th local component."""
    if _holds_no_distributed_value(value):  # a step's usual arguments: no nest walk
        return value
    return map_structure(lambda x: x.values[index] if isinstance(x, DistributedValues) else x,
                         value)


def wrap_nest(value: Any, kind: type[DistributedValues] = PerReplica) -> Any:
    """Wrap every leaf of a nest in ``kind`` (``None`` leaves stay ``None``)."""
    if type(value) in _PLAIN:  # a step's usual result, a tensor: no nest walk
        return None if value is None else kind((value,))
    return map_structure(lambda x: x if x is None or isinstance(x, DistributedValues)
                         else kind((x,)), value)


# Leaf types that are never a nest nor a distributed value (fast paths of ``strategy.run``).
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None)})


def _holds_no_distributed_value(value: Any) -> bool:
    """True for plain leaves and tuples of them two levels deep (a cheap check that covers
    ``args=(x, y)`` and ``args=((x, y),)``); False means "look"."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is not tuple:
        return False
    for item in value:
        if type(item) in _PLAIN:
            continue
        if type(item) is not tuple:
            return False
        for x in item:  # a loop rather than any(...): this runs at every step
            if type(x) not in _PLAIN:
                return False
    return True


def local_results(value: Any) -> tuple[Any, ...]:
    """Split a nest of distributed values into one nest per local replica."""
    leaves = flatten(value)
    n = max((len(x.values) for x in leaves if isinstance(x, DistributedValues)), default=1)
    return tuple(unwrap(value, i) for i in range(n))
