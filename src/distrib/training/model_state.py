"""What a checkpoint holds of a ``distrib.Model``: module, optimizer, metric states, step counter.

``Model.checkpoint_children()`` returns these, so ``distrib.Checkpoint(model=model)``
saves the module (through the strategy's state-dict hooks), the optimizer (with its
loss-scale state), the train-step counter and every metric's accumulated state.

Metric states are per replica: each replica accumulates its own and ``fit``
all-reduces them when it logs.  Restored onto the same number of replicas each gets
its own back; onto another number replica 0 gets the sum of every saved replica's
states and the others start from zero — the all-reduced (logged) values are the same,
because metric states add up.  Metrics are built at the first batch (as in Keras):
states restored before that are applied as soon as the metric exists, before its
first read.

Example::

    checkpoint = distrib.Checkpoint(model=model)   # tracks all of the above
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from distrib import nest
from distrib.training.compile_utils import unpack_x_y_sample_weight

__all__ = ["MetricStates", "TrainCounter", "merge_replica_states", "build_metrics",
           "metrics_pending"]


def metrics_pending(model: Any) -> bool:
    """Whether restored metric states wait for their metrics to be built."""
    return bool(model._restored_metrics)


def build_metrics(model: Any, data: Any) -> None:
    """Build ``model``'s loss trackers and compiled metrics from one batch, then apply the
    restored metric states (a forward pass in inference mode under ``no_grad``: no weight,
    metric or random state changes).

    ``fit`` calls it when it resumes from a backup before any step has run.
    """
    module = model.module
    was = module.training
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    data = nest.map_structure(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v,
                              data)
    x, y, sample_weight = unpack_x_y_sample_weight(data)

    def forward() -> None:  # in replica context, where metrics of a strategy are updated
        y_pred = model(x, training=False)
        if model.compiled_loss is not None and y is not None:
            model.compute_loss(x, y, y_pred, sample_weight, training=False)
        model.compute_metrics(x, y, y_pred, sample_weight)

    with torch.no_grad():
        model.distribute_strategy.extended.call_for_each_replica(forward)
    module.train(was)
    pending = dict(model._restored_metrics)
    model._restored_metrics = {}
    for m in model.built_metrics():
        m.reset_state()  # drop the sample's updates
    model.restore_metric_states(pending)


def merge_replica_states(states: Sequence[dict[str, list[torch.Tensor]]], replica_id: int,
                         num_replicas: int) -> dict[str, list[torch.Tensor]]:
    """This replica's metric states from what every saved replica saved (see the module doc).

    Example:
        >>> saved = [{"loss": [torch.tensor(1.0)]}, {"loss": [torch.tensor(2.0)]}]
        >>> merge_replica_states(saved, 0, 1)["loss"]
        [tensor(3.)]
    """
    if len(states) == num_replicas:
        return dict(states[replica_id])
    merged: dict[str, list[torch.Tensor]] = {}
    for name, first in states[0].items():
        parts = [s[name] for s in states if name in s]
        if replica_id == 0:
            merged[name] = [torch.stack([p[i] for p in parts]).sum(0) for i in range(len(first))]
        else:
            merged[name] = [torch.zeros_like(t) for t in first]
    return merged


class MetricStates:
    """The model's metric states as per-replica checkpoint state."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def local_state_dict(self) -> dict[str, list[torch.Tensor]]:
        """Every built metric's accumulated state, by name."""
        return {m.name: m.state_tensors() for m in self._model.built_metrics()}

    def load_local_state_dict(self, states: Sequence[dict[str, list[torch.Tensor]]],
                              replica_id: int, num_replicas: int) -> None:
        """Reset the metrics, then give them the saved states (now, or once built)."""
        self._model.reset_metrics()
        self._model.restore_metric_states(merge_replica_states(states, replica_id,
                                                               num_replicas))


class TrainCounter:
    """The model's count of training steps (Keras' ``_train_counter``)."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def state_dict(self) -> dict[str, int]:
        return {"train_counter": int(self._model._train_counter)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._model._train_counter = int(state["train_counter"])
