"""The function ``fit`` runs on each replica for one training step.

Keras builds a ``train_function`` once per ``fit`` and runs it at every step; so does
distrib. For a model that overrides nothing in Keras' default step (``train_step``, the
``compute_loss``, ``minimize`` and ``compute_metrics`` it calls, and the model's call),
the function is that same step with what it looks up resolved once: the same
operations, in the same order, with the same results, and tens of microseconds less
Python per step — which matters for small models, whose steps take a millisecond.

The default step is only taken when it is exactly ``Model.train_step``: any override, a
mixed-precision policy (autocast, loss scaling), ``jit_compile``, a hook on the model, a
batch other than ``(x, y)`` (sample weights, class weights) or a model switched out of
training mode runs ``model.train_step`` itself, checked at every step where it can
change.

``Model._make_train_function`` picks one of the two; ``fit`` calls it once.

Example::

    step = model._make_train_function()     # once per fit, on each replica
    logs = step((x, y), 64)                  # inside the strategy's replica context
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from distrib.comm import torch_adapter
from distrib.distribute import context
from distrib.training.compile_utils import rows_of

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["TrainFunction", "DefaultStep", "user_step"]

TrainFunction = Callable[[Any, "int | None"], Any]
"""``fn(data, global_rows)``: one step on this replica's batch; ``global_rows`` is the
step's examples over all replicas when the caller knows it (else None)."""



def user_step(model: Model) -> TrainFunction:
    """``model.train_step`` as a :data:`TrainFunction` (the replica context carries the rows)."""
    def step(data: Any, global_rows: int | None) -> Any:
        return model.train_step(data)
    return step


class DefaultStep:
    """``Model.train_step`` for an ``(x, y)`` batch, with the model's parts resolved once.

    Args:
        model: a model that overrides none of the step's methods, compiled with a loss
            and without loss scaling.
        module: the module the model's call runs (``model(x)`` is ``module(x)``).
        replicas: the strategy's replicas in sync.
    """

    def __init__(self, model: Model, module: torch.nn.Module, replicas: int) -> None:
        self.model = model
        self.module = module
        self.loss = model.compiled_loss
        self.replicas = replicas
        metrics = model.compiled_metrics
        self.with_metrics = metrics is not None and not metrics.empty
        self.results: Mapping[str, Any] | None = None
        # The compiled loss's per-step call, once its first call has built it.
        self.step_loss: Callable[..., torch.Tensor] | None = None

    def __call__(self, data: Any, global_rows: int | None) -> Any:
        model = self.model
        if type(data) is not tuple or len(data) != 2 or data[1] is None \
                or not model.training or not torch_adapter.calls_forward_directly(model):
            return model.train_step(data)
        x, y = data
        y_pred = self.module(x)  # what model(x, training=True) runs here
        if global_rows is None:  # as compute_loss finds it: from the replica context
            ctx = context.get_replica_context()
            local = rows_of(y)
            global_rows = ctx.global_batch_size(local) if ctx is not None \
                else local * self.replicas
        step_loss = self.step_loss
        if step_loss is None:
            assert self.loss is not None
            loss: torch.Tensor = self.loss(y, y_pred, None, global_rows, self.replicas)
            self.step_loss = self.loss.step_loss()
        else:
            loss = step_loss(y, y_pred, None, global_rows, self.replicas)
        if loss.requires_grad:  # minimize(): nothing trains when every weight is frozen
            optimizer = model.optimizer
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if self.with_metrics or self.results is None:
            self.results = model.compute_metrics(x, y, y_pred, None)
        return self.results
