"""Keras' optimizer classes with Keras' arguments and defaults, on torch's update rules.

| Keras class | torch update rule | Keras arguments mapped |
|---|---|---|
| ``SGD`` | ``torch.optim.SGD`` | ``momentum``, ``nesterov`` |
| ``Adam`` | ``torch.optim.Adam`` | ``beta_1``, ``beta_2`` (``betas``), ``epsilon``, ``amsgrad`` |
| ``AdamW`` | ``torch.optim.AdamW`` | ``weight_decay`` 0.004 (decoupled) |
| ``RMSprop`` | ``torch.optim.RMSprop`` | ``rho`` (``alpha``), ``momentum``, ``centered`` |
| ``Adagrad`` | ``torch.optim.Adagrad`` | ``initial_accumulator_value`` |
| ``Adadelta`` | ``torch.optim.Adadelta`` | ``rho`` |
| ``Adamax`` | ``torch.optim.Adamax`` | ``beta_1``, ``beta_2`` |
| ``Nadam`` | ``torch.optim.NAdam`` (``momentum_decay=1``: Keras' ``0.96 ** t``) | ``beta_1``, ``beta_2`` |
| ``Lion`` | :class:`TorchLion` (below) | ``beta_1``, ``beta_2`` |

The rules agree with Keras' formulas but for where ``epsilon`` enters (torch adds it to
the square root, Keras under it or after the bias correction: a difference of the order
of ``epsilon``), and, for ``SGD`` with momentum and ``RMSprop`` with momentum under a
changing learning rate, torch keeps the velocity unscaled and multiplies it by the
current rate where Keras accumulates the rate into it. Weight decay is Keras' decoupled
``w -= w * weight_decay * learning_rate`` for every class (torch's own coupled
``weight_decay`` is not used).

Example:
    >>> import torch
    >>> opt = Adam(learning_rate=0.01).build(torch.nn.Linear(2, 1))
    >>> isinstance(opt, torch.optim.Adam), opt.learning_rate
    (True, 0.01)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from distrib.training.keras_optimizers import KerasOptimizer

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam",
           "Lion", "TorchLion", "BY_NAME"]


class TorchLion(torch.optim.Optimizer):
    """The Lion update (Chen et al., 2023) as a ``torch.optim.Optimizer`` (torch has none):
    ``w -= lr * sign(beta_1 * m + (1 - beta_1) * g)``, then
    ``m = beta_2 * m + (1 - beta_2) * g``.

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([1.0])); w.grad = torch.tensor([-3.0])
        >>> TorchLion([w], lr=0.1).step(); round(w.item(), 6)
        1.1
    """

    def __init__(self, params: Any, lr: float = 0.001,
                 betas: tuple[float, float] = (0.9, 0.99)) -> None:
        super().__init__(params, {"lr": lr, "betas": betas})

    @torch.no_grad()  # type: ignore[untyped-decorator,misc]
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta_1, beta_2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.add_(torch.sign(m * beta_1 + p.grad * (1.0 - beta_1)), alpha=-group["lr"])
                m.mul_(beta_2).add_(p.grad * (1.0 - beta_2))
        return loss


class SGD(KerasOptimizer, torch.optim.SGD):
    """Keras' ``SGD(learning_rate=0.01, momentum=0.0, nesterov=False)`` on ``torch.optim.SGD``."""

    _torch_class = torch.optim.SGD
    _fusable = True

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0,
                 nesterov: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"momentum": momentum, "nesterov": nesterov},
                         keras_args={"momentum": momentum, "nesterov": nesterov}, **kwargs)


class Adam(KerasOptimizer, torch.optim.Adam):
    """Keras' ``Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
    amsgrad=False)`` on ``torch.optim.Adam``."""

    _torch_class = torch.optim.Adam
    _fusable = True

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"betas": (beta_1, beta_2), "eps": epsilon,
                                         "amsgrad": amsgrad},
                         keras_args={"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon,
                                     "amsgrad": amsgrad}, **kwargs)


class AdamW(KerasOptimizer, torch.optim.AdamW):
    """Keras' ``AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
    epsilon=1e-7, amsgrad=False)`` on ``torch.optim.AdamW`` (its decay, Keras' decoupled
    rule, is applied with the exclusions of ``exclude_from_weight_decay``)."""

    _torch_class = torch.optim.AdamW
    _fusable = True

    def __init__(self, learning_rate: Any = 0.001, weight_decay: float = 0.004,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"betas": (beta_1, beta_2), "eps": epsilon,
                                         "amsgrad": amsgrad, "weight_decay": 0.0},
                         keras_args={"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon,
                                     "amsgrad": amsgrad},
                         weight_decay=weight_decay, **kwargs)


class RMSprop(KerasOptimizer, torch.optim.RMSprop):
    """Keras' ``RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
    centered=False)`` on ``torch.optim.RMSprop``."""

    _torch_class = torch.optim.RMSprop

    def __init__(self, learning_rate: Any = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"alpha": rho, "momentum": momentum, "eps": epsilon,
                                         "centered": centered},
                         keras_args={"rho": rho, "momentum": momentum, "epsilon": epsilon,
                                     "centered": centered}, **kwargs)


class Adagrad(KerasOptimizer, torch.optim.Adagrad):
    """Keras' ``Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7)``
    on ``torch.optim.Adagrad``."""

    _torch_class = torch.optim.Adagrad
    _fusable = True

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"initial_accumulator_value": initial_accumulator_value,
                                         "eps": epsilon},
                         keras_args={"initial_accumulator_value": initial_accumulator_value,
                                     "epsilon": epsilon}, **kwargs)


class Adadelta(KerasOptimizer, torch.optim.Adadelta):
    """Keras' ``Adadelta(learning_rate=0.001, rho=0.95, epsilon=1e-7)`` on
    ``torch.optim.Adadelta`` (the same rule)."""

    _torch_class = torch.optim.Adadelta

    def __init__(self, learning_rate: Any = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, {"rho": rho, "eps": epsilon},
                         keras_args={"rho": rho, "epsilon": epsilon}, **kwargs)


class Adamax(KerasOptimizer, torch.optim.Adamax):
    """Keras' ``Adamax(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)`` on
    ``torch.optim.Adamax``."""

    _torch_class = torch.optim.Adamax

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"betas": (beta_1, beta_2), "eps": epsilon},
                         keras_args={"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon},
                         **kwargs)


class Nadam(KerasOptimizer, torch.optim.NAdam):
    """Keras' ``Nadam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)`` on
    ``torch.optim.NAdam`` with ``momentum_decay=1`` (Keras' momentum schedule
    ``beta_1 * (1 - 0.5 * 0.96 ** t)``)."""

    _torch_class = torch.optim.NAdam

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, {"betas": (beta_1, beta_2), "eps": epsilon,
                                         "momentum_decay": 1.0},
                         keras_args={"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon},
                         **kwargs)


class Lion(KerasOptimizer, TorchLion):
    """Keras' ``Lion(learning_rate=0.001, beta_1=0.9, beta_2=0.99)`` on :class:`TorchLion`."""

    _torch_class = TorchLion

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, {"betas": (beta_1, beta_2)},
                         keras_args={"beta_1": beta_1, "beta_2": beta_2}, **kwargs)


BY_NAME: dict[str, Callable[[], KerasOptimizer]] = {
    cls.__name__.lower(): cls for cls in (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta,
                                          Adamax, Nadam, Lion)}
"""Keras' optimizer names (``"adam"``) and their classes."""
