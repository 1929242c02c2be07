"""``distrib.models``: Keras' ``models`` module — ``Model`` and ``load_model``.

Example::

    model.save("digits.pt")
    with strategy.scope():
        restored = distrib.models.load_model("digits.pt")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrib.training.model import Model
    from distrib.training.model_io import load_model

_NAMES = {"Model": "distrib.training.model", "load_model": "distrib.training.model_io"}


def __getattr__(name: str) -> Any:
    import importlib

    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'distrib.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["Model", "load_model"]
