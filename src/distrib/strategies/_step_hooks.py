"""torch's global optimizer step hooks, dispatched to the strategies that take part in steps.

Every strategy of more than one replica (its gradients may need summing when the
optimizer applies them, TensorFlow's ``apply_gradients``), and every strategy whose
parameters are not updated where the gradients are computed (ParameterServerStrategy:
on the ``ps`` tasks; CentralStorageStrategy: once, on the chief), is added here; from
then on every ``optimizer.step()`` in this process — ``Model.fit``'s or a custom loop's,
whoever created the optimizer — asks each of them whether it manages the optimizer and
calls its ``before_optimizer_step`` / ``after_optimizer_step``.  An optimizer no
strategy manages costs one question per strategy and step.

Example::

    StepHooks.add(strategy.extended)
    optimizer.step()     # strategy.extended.before_optimizer_step(optimizer) runs first
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

__all__ = ["StepHooks"]


class _Owner(Protocol):
    def manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool: ...

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...


class StepHooks:
    """The process-wide hooks (installed once) and the strategies they serve, held weakly.

    ``owners`` is replaced, never changed in place, so a step iterates it without a copy.
    """

    owners: tuple[weakref.ref[Any], ...] = ()
    installed = False

    @classmethod
    def add(cls, owner: _Owner) -> None:
        """Install the hooks if needed and serve ``owner`` (held weakly)."""
        if not cls.installed:
            register_optimizer_step_pre_hook(cls._pre)
            register_optimizer_step_post_hook(cls._post)
            cls.installed = True
        live = tuple(ref for ref in cls.owners if ref() is not None)
        if not any(ref() is owner for ref in live):
            live += (weakref.ref(owner),)
        cls.owners = live

    @classmethod
    def remove(cls, owner: _Owner) -> None:
        """Stop serving ``owner``."""
        cls.owners = tuple(ref for ref in cls.owners if ref() not in (None, owner))

    @classmethod
    def _pre(cls, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for ref in cls.owners:
            owner = ref()
            if owner is not None and owner.manages_optimizer(optimizer):
                owner.before_optimizer_step(optimizer)

    @classmethod
    def _post(cls, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for ref in cls.owners:
            owner = ref()
            if owner is not None and owner.manages_optimizer(optimizer):
                owner.after_optimizer_step(optimizer)
