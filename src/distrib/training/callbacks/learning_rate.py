"""The learning rate of a compiled optimizer, as the learning-rate callbacks read and set it.

A torch optimizer holds it in each param group's ``"lr"`` (a number or a tensor); a
Keras-style optimizer of ``distrib.optimizers`` holds it as ``learning_rate``, which
refuses a new value while a schedule drives it, as in Keras.

Example:
    >>> import torch
    >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    >>> set_lr(opt, 0.1); get_lr(opt)
    0.1
"""

from __future__ import annotations

from typing import Any

from distrib.errors import UsageError, explain

__all__ = ["get_lr", "set_lr"]


def _param_groups(optimizer: Any) -> list[dict[str, Any]]:
    groups = getattr(optimizer, "param_groups", None)
    if not groups or "lr" not in groups[0]:
        raise UsageError(explain(
            "model.optimizer", optimizer,
            'Optimizer must have a "lr" attribute (a torch optimizer whose param_groups '
            'hold "lr")', "compile the model with an optimizer such as 'sgd' or "
            "torch.optim.SGD(params, lr=0.01)"))
    return list(groups)


def get_lr(optimizer: Any) -> float:
    """The learning rate of a torch optimizer (its first param group's ``"lr"``).

    Example:
        >>> import torch
        >>> get_lr(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5))
        0.5
    """
    return float(_param_groups(optimizer)[0]["lr"])


def set_lr(optimizer: Any, lr: float) -> None:
    """Sets the learning rate of every param group of a torch optimizer to ``lr``.

    Example:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
        >>> set_lr(opt, 0.1); get_lr(opt)
        0.1
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if hasattr(inner, "has_schedule") and hasattr(inner, "learning_rate"):  # a Keras one:
        inner.learning_rate = float(lr)  # refused under a schedule, as in Keras
        return
    for group in _param_groups(optimizer):
        if hasattr(group["lr"], "fill_"):  # a tensor learning rate
            group["lr"].fill_(float(lr))
        else:
            group["lr"] = float(lr)
