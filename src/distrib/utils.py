"""``distrib.utils``: Keras' ``utils`` for input — ``Sequence``.

Example::

    class Batches(distrib.utils.Sequence):
        def __len__(self):
            return 10
        def __getitem__(self, i):
            return x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrib.training.sequence import Sequence


def __getattr__(name: str) -> Any:
    import importlib

    if name != "Sequence":
        raise AttributeError(f"module 'distrib.utils' has no attribute {name!r}")
    value = importlib.import_module("distrib.training.sequence").Sequence
    globals()[name] = value
    return value


__all__ = ["Sequence"]
