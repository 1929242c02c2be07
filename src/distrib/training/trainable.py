"""Keras' ``trainable`` attribute on torch modules.

Keras freezes a layer with ``layer.trainable = False`` and unfreezes it with ``True``;
the value applies to every weight of the layer and of the layers inside it.  On a
``distrib.Model`` ``trainable`` is a property that does this at once.  A plain
``torch.nn.Module`` has no such attribute — the assignment just stores a value
that torch ignores — so distrib applies it when the model is compiled or trained
(``compile``, ``fit``, ``evaluate``, ``predict``, ``train_on_batch``), which is when
Keras applies it too: ``requires_grad`` of the module's parameters follows the
value, and the value is copied to the ``trainable`` attributes of the modules inside
(Keras' recursion).  Among modules whose value changed since the last time, the
outer ones are applied first, so an inner module's own value wins.

Under a strategy the replicas then rebuild their gradient reducer for the new set
of trainable parameters, after checking that every replica made the same change.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    >>> net[0].trainable = False
    >>> apply_trainable_attributes(net)
    True
    >>> [p.requires_grad for p in net.parameters()]
    [False, False, True, True]
"""

from __future__ import annotations

import weakref

from torch import nn

from distrib.errors import InvalidTypeError, explain

__all__ = ["apply_trainable_attributes", "set_trainable"]

_applied: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def _flag(module: nn.Module) -> bool | None:
    value = module.__dict__.get("trainable")
    if value is None:
        return None
    if not isinstance(value, bool):
        raise InvalidTypeError(explain(f"{type(module).__name__}.trainable", value,
                                       "must be True or False", "assign a bool"))
    return value


def set_trainable(module: nn.Module, value: bool) -> None:
    """Keras' ``module.trainable = value``: every parameter inside, and the ``trainable``
    attributes of the modules inside.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(2, 1); set_trainable(net, False)
        >>> net.weight.requires_grad
        False
    """
    module.requires_grad_(value)
    for inner in module.modules():
        if inner is not module and _flag(inner) is not None:
            inner.__dict__["trainable"] = value
            _applied[inner] = value


def apply_trainable_attributes(root: nn.Module) -> bool:
    """Apply the ``trainable`` attributes set on modules of ``root`` since the last call.

    Returns whether anything changed.
    """
    changed = [m for m in root.modules()
               if (flag := _flag(m)) is not None and _applied.get(m) is not flag]
    for module in changed:
        flag = _flag(module)
        assert flag is not None
        module.requires_grad_(flag)
        for inner in module.modules():
            if inner is not module and _flag(inner) is not None and inner not in changed:
                inner.__dict__["trainable"] = flag
                _applied[inner] = flag
        _applied[module] = flag
    return bool(changed)
