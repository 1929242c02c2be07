"""Optimizers by Keras name, with Keras' default hyper-parameters, built on ``torch.optim``.

``get("adam", params)`` returns ``torch.optim.Adam(params, lr=0.001, eps=1e-7)``:
the update rule is torch's, the defaults are Keras' (learning rate, epsilon,
momentum terms).  Any ``torch.optim.Optimizer`` instance is used as it is, and a
``torch.optim.Optimizer`` subclass is instantiated on the parameters with torch's
defaults.

| name | class | Keras defaults applied |
|---|---|---|
| ``"sgd"`` | ``SGD`` | lr 0.01, momentum 0 |
| ``"adam"`` | ``Adam`` | lr 0.001, betas (0.9, 0.999), eps 1e-7 |
| ``"adamw"`` | ``AdamW`` | lr 0.001, weight_decay 0.004, eps 1e-7 |
| ``"rmsprop"`` | ``RMSprop`` | lr 0.001, rho (alpha) 0.9, eps 1e-7 |
| ``"adagrad"`` | ``Adagrad`` | lr 0.001, initial accumulator 0.1, eps 1e-7 |

Example:
    >>> import torch
    >>> opt = get("adam", torch.nn.Linear(2, 1).parameters())
    >>> type(opt).__name__, opt.param_groups[0]["lr"]
    ('Adam', 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["KERAS_DEFAULTS", "get", "learning_rate", "set_learning_rate"]

KERAS_DEFAULTS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "sgd": (torch.optim.SGD, {"lr": 0.01, "momentum": 0.0}),
    "adam": (torch.optim.Adam, {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-7}),
    "adamw": (torch.optim.AdamW, {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-7,
                                  "weight_decay": 0.004}),
    "rmsprop": (torch.optim.RMSprop, {"lr": 0.001, "alpha": 0.9, "eps": 1e-7,
                                      "momentum": 0.0}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.001, "initial_accumulator_value": 0.1,
                                      "eps": 1e-7}),
}
"""Keras' default hyper-parameters, translated to the matching ``torch.optim`` class."""

_FUSED = ("sgd", "adam", "adamw", "adagrad")  # torch has fused kernels for these


def get(identifier: Any, params: Iterable[torch.nn.Parameter] | Callable[[], Any],
        fused: bool = False) -> torch.optim.Optimizer:
    """Resolve ``identifier`` to an optimizer over ``params``.

    Args:
        identifier: a Keras name (``"adam"``), a ``torch.optim.Optimizer`` instance
            (returned unchanged), or an optimizer class (instantiated on ``params``).
        params: the parameters to optimise (or a function returning them, called
            only when a new optimizer is built).
        fused: for a name, build torch's fused implementation where torch has one
            for these parameters (``sgd``, ``adam``, ``adamw``, ``adagrad``): it takes
            loss scaling's found-inf flag on the device, so a skipped step needs no
            host synchronisation.

    Example:
        >>> net = torch.nn.Linear(2, 1)
        >>> get(torch.optim.SGD(net.parameters(), lr=0.5), net.parameters()).param_groups[0]["lr"]
        0.5
    """
    if isinstance(identifier, torch.optim.Optimizer):
        return identifier
    if hasattr(identifier, "inner_optimizer") and hasattr(identifier, "param_groups"):
        return identifier  # type: ignore[no-any-return]  # a LossScaleOptimizer
    plist = list(params() if callable(params) else params)
    if isinstance(identifier, str):
        key = identifier.lower()
        if key not in KERAS_DEFAULTS:
            raise UsageError(explain("optimizer", identifier, f"Unknown optimizer: "
                                     f"{identifier!r}; the optimizer names are "
                                     + ", ".join(sorted(KERAS_DEFAULTS)),
                                     "pass one of those names or a torch.optim optimizer"))
        cls, kwargs = KERAS_DEFAULTS[key]
        if fused and key in _FUSED:
            try:
                return cls(plist, **kwargs, fused=True)  # type: ignore[call-arg]
            except (RuntimeError, ValueError):  # not on these parameters' devices/dtypes
                pass
        return cls(plist, **kwargs)
    if isinstance(identifier, type) and issubclass(identifier, torch.optim.Optimizer):
        built: torch.optim.Optimizer = identifier(plist)  # type: ignore[call-arg]
        return built
    raise InvalidTypeError(explain("optimizer", identifier, "must be a Keras optimizer name, "
                                   "a torch.optim.Optimizer or an Optimizer class",
                                   "pass e.g. optimizer='adam' or torch.optim.SGD(params, lr=0.1)"))


def learning_rate(optimizer: Any) -> float:
    """The learning rate of the first parameter group.

    Example:
        >>> learning_rate(get("sgd", torch.nn.Linear(1, 1).parameters()))
        0.01
    """
    return float(optimizer.param_groups[0]["lr"])


def set_learning_rate(optimizer: Any, lr: float) -> None:
    """Set the learning rate of every parameter group (what LR callbacks do).

    Example:
        >>> opt = get("sgd", torch.nn.Linear(1, 1).parameters()); set_learning_rate(opt, 0.1)
        >>> learning_rate(opt)
        0.1
    """
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr < 0:
        raise UsageError(explain("learning rate", lr, "must be a non-negative finite number",
                                 "pass e.g. 0.001"))
    for group in optimizer.param_groups:
        group["lr"] = lr
