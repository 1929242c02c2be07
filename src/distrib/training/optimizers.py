"""Keras' optimizers (``tf.keras.optimizers``) on torch's update rules, and ``get``.

``distrib.optimizers.Adam(learning_rate=0.001)`` and the other Keras classes (``SGD``,
``RMSprop``, ``Adagrad``, ``Adadelta``, ``AdamW``, ``Adamax``, ``Nadam``, ``Lion``) take
Keras' arguments — ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``weight_decay``,
``use_ema``, ``gradient_accumulation_steps``, a ``schedules`` object as ``learning_rate``
— and become the matching ``torch.optim`` optimizer when ``compile`` builds them on the
model (see :mod:`distrib.training.keras_optimizers`). A name (``optimizer="adam"``)
builds that class with Keras' defaults. Any ``torch.optim.Optimizer`` instance is used
as it is, and a ``torch.optim.Optimizer`` subclass is instantiated on the parameters
with torch's defaults.

| name | class | Keras defaults |
|---|---|---|
| ``"sgd"`` | ``SGD`` | lr 0.01, momentum 0 |
| ``"adam"`` | ``Adam`` | lr 0.001, betas (0.9, 0.999), epsilon 1e-7 |
| ``"adamw"`` | ``AdamW`` | lr 0.001, weight_decay 0.004, epsilon 1e-7 |
| ``"rmsprop"`` | ``RMSprop`` | lr 0.001, rho 0.9, epsilon 1e-7 |
| ``"adagrad"`` | ``Adagrad`` | lr 0.001, initial accumulator 0.1, epsilon 1e-7 |
| ``"adadelta"`` | ``Adadelta`` | lr 0.001, rho 0.95, epsilon 1e-7 |
| ``"adamax"`` | ``Adamax`` | lr 0.001, betas (0.9, 0.999), epsilon 1e-7 |
| ``"nadam"`` | ``Nadam`` | lr 0.001, betas (0.9, 0.999), epsilon 1e-7 |
| ``"lion"`` | ``Lion`` | lr 0.001, betas (0.9, 0.99) |

Example:
    >>> import torch
    >>> opt = get("adam", torch.nn.Linear(2, 1).parameters())
    >>> isinstance(opt, torch.optim.Adam), opt.param_groups[0]["lr"], opt.learning_rate
    (True, 0.001, 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training import lr_schedules as schedules
from distrib.training.keras_optimizer_classes import (
    BY_NAME,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    Lion,
    Nadam,
    RMSprop,
)
from distrib.training.keras_optimizers import KerasOptimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "Nadam", "Lion", "schedules", "get", "learning_rate", "set_learning_rate"]

Optimizer = KerasOptimizer
"""The base class of the Keras optimizers (Keras' ``keras.optimizers.Optimizer``)."""


def get(identifier: Any, params: Iterable[torch.nn.Parameter] | Callable[[], Any],
        fused: bool = False) -> torch.optim.Optimizer:
    """Resolve ``identifier`` to an optimizer over ``params``.

    Args:
        identifier: a Keras name (``"adam"``), a Keras optimizer of this module (built on
            ``params``), a ``torch.optim.Optimizer`` instance (returned unchanged), or an
            optimizer class (instantiated on ``params``).
        params: the parameters to optimise, or a function returning them (called only when
            an optimizer is built). A module's bound ``parameters`` method also gives the
            parameters' names, which ``exclude_from_weight_decay(var_names=...)`` matches.
        fused: build torch's fused implementation where torch has one for these
            parameters (``sgd``, ``adam``, ``adamw``, ``adagrad``) and no gradient is
            transformed (clipping, accumulation): it takes loss scaling's found-inf flag
            on the device, so a skipped step needs no host synchronisation.

    Example:
        >>> net = torch.nn.Linear(2, 1)
        >>> get(torch.optim.SGD(net.parameters(), lr=0.5), net.parameters()).param_groups[0]["lr"]
        0.5
        >>> get(SGD(0.1, momentum=0.9), net.parameters).param_groups[0]["momentum"]
        0.9
    """
    if isinstance(identifier, str):
        cls = BY_NAME.get(identifier.lower())
        if cls is None:
            raise UsageError(explain("optimizer", identifier, f"Unknown optimizer: "
                                     f"{identifier!r}; the optimizer names are "
                                     + ", ".join(sorted(BY_NAME)),
                                     "pass one of those names or a torch.optim optimizer"))
        identifier = cls()
    if isinstance(identifier, KerasOptimizer):
        owner = getattr(params, "__self__", None)
        names = {id(p): n for n, p in owner.named_parameters()} \
            if isinstance(owner, torch.nn.Module) else None
        return identifier.build(params() if callable(params) else params, fused=fused,
                                names=names)
    if isinstance(identifier, torch.optim.Optimizer):
        return identifier
    if hasattr(identifier, "inner_optimizer") and hasattr(identifier, "param_groups"):
        return identifier  # type: ignore[no-any-return]  # a LossScaleOptimizer
    if isinstance(identifier, type) and issubclass(identifier, torch.optim.Optimizer):
        plist = list(params() if callable(params) else params)
        built: torch.optim.Optimizer = identifier(plist)  # type: ignore[call-arg]
        return built
    raise InvalidTypeError(explain("optimizer", identifier, "must be a Keras optimizer name, "
                                   "a distrib.optimizers optimizer, a torch.optim.Optimizer "
                                   "or an Optimizer class",
                                   "pass e.g. optimizer='adam', distrib.optimizers.Adam(1e-3) "
                                   "or torch.optim.SGD(params, lr=0.1)"))


def learning_rate(optimizer: Any) -> float:
    """The learning rate of the first parameter group.

    Example:
        >>> learning_rate(get("sgd", torch.nn.Linear(1, 1).parameters()))
        0.01
    """
    return float(optimizer.param_groups[0]["lr"])


def set_learning_rate(optimizer: Any, lr: float) -> None:
    """Set the learning rate of every parameter group (what LR callbacks do); a Keras
    optimizer that follows a schedule refuses, as in Keras.

    Example:
        >>> opt = get("sgd", torch.nn.Linear(1, 1).parameters()); set_learning_rate(opt, 0.1)
        >>> learning_rate(opt)
        0.1
    """
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr < 0:
        raise UsageError(explain("learning rate", lr, "must be a non-negative finite number",
                                 "pass e.g. 0.001"))
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if isinstance(inner, KerasOptimizer):
        inner.learning_rate = lr
        return
    for group in optimizer.param_groups:
        group["lr"] = lr
