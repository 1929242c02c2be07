"""The strategy of a ``distrib.Model``: the one it was created under, and its scope rule.

A model created inside ``strategy.scope()`` records that strategy and runs ``compile``,
``fit``, ``evaluate``, ``predict`` and the ``*_on_batch`` methods under it, re-entering
its scope as Keras does.  A model created outside any scope and used inside one raises
TensorFlow's error, before anything runs.

Example::

    with strategy.scope():
        model = distrib.Model(net)
    model.distribute_strategy is strategy   # True
"""

from __future__ import annotations

import contextlib
from typing import Any

from torch import nn

from distrib.distribute import context
from distrib.errors import ScopeError, explain
from distrib.training.trainable import apply_trainable_attributes

__all__ = ["ModelStrategy"]


class ModelStrategy(nn.Module):
    """The strategy part of ``distrib.Model`` (``distribute_strategy`` and its scope)."""

    _strategy: Any

    @property
    def distribute_strategy(self) -> Any:
        """The strategy the model was created under (else the current strategy)."""
        return self._strategy if self._strategy is not None else context.get_strategy()

    def _scope(self) -> Any:
        """Re-enter the captured strategy's scope (as Keras' fit/evaluate/predict do)."""
        if self._strategy is None:
            return contextlib.nullcontext()
        return self._strategy.scope()

    def _enter(self, what: str) -> None:
        """Before ``what`` (compile, fit, ...): TensorFlow's scope rule, the Keras
        ``trainable`` attributes, and the modules of a still-open scope set up."""
        if self._strategy is None and context.has_strategy():
            raise ScopeError(_outside_scope(self, context.get_strategy(), what))
        apply_trainable_attributes(self)
        if self._strategy is not None:
            extended = self._strategy.extended
            extended.setup_scope_modules()
            extended.refresh_modules(self)

    def _replica_count(self) -> int:
        """Replicas in sync of the model's strategy (fixed for a strategy, so kept)."""
        strategy = self._strategy
        if strategy is None:
            return int(context.get_strategy().extended.replica_group.num_replicas_in_sync)
        known = self.__dict__.get("_replicas_of")
        if known is None or known[0] is not strategy:
            known = (strategy, int(strategy.extended.replica_group.num_replicas_in_sync))
            object.__setattr__(self, "_replicas_of", known)
        return int(known[1])


def _outside_scope(model: nn.Module, strategy: Any, what: str) -> str:
    first = next(model.named_parameters(), None)
    where = f"{first[0]} of the model" if first is not None else "the model"
    return explain(
        f"model.{what}()", f"{model!r} created outside the scope",
        f"Variable ({where}) was not created in the distribution strategy scope of "
        f"({strategy!r}). It is most likely because some layers, model, or optimizer was "
        "being created outside the distribution strategy scope. Try to make sure your code "
        "looks similar to the following.\nwith strategy.scope():\n  model=_create_model()\n"
        "  model.compile(...)",
        "create the distrib.Model and its layers inside `with strategy.scope():`")
