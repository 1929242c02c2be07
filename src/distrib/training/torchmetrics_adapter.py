"""``torchmetrics`` metrics in ``compile(metrics=[...])``: a :class:`Metric` around one.

``model.compile(metrics=[torchmetrics.classification.MulticlassAccuracy(num_classes=10)])``
works as a Keras metric does: it is updated with Keras' argument order turned into
torchmetrics' (``update(preds=y_pred, target=y_true)``), on the device of the
predictions, and its ``result()`` is the value over every replica — the metric's
states are summed across the replicas with the other metrics' (one all-reduce), then
torchmetrics' ``compute`` runs on the summed states.

The states must be ones torchmetrics itself sums across processes
(``dist_reduce_fx="sum"``: counts, totals, confusion matrices, binned curves — most
metrics); a metric with list or ``"cat"`` states (an ``AUROC`` without ``thresholds``,
say) is refused with the way out. torchmetrics is optional: ``pip install
'distrib[torchmetrics]'``.

Example:
    >>> import torch, torchmetrics
    >>> m = TorchMetric(torchmetrics.MeanSquaredError())
    >>> m.update_state(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0]))
    >>> float(m.result()), m.name
    (2.0, 'mean_squared_error')
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from distrib.errors import UsageError, explain
from distrib.training.losses import _snake
from distrib.training.metric_base import Metric

__all__ = ["TorchMetric", "is_torchmetric"]


def is_torchmetric(value: Any) -> bool:
    """Whether ``value`` is a ``torchmetrics.Metric`` (torchmetrics is not imported here).

    Example:
        >>> is_torchmetric(lambda t, p: t)
        False
    """
    module = sys.modules.get("torchmetrics")
    return module is not None and isinstance(value, module.Metric)


def _summed_states(metric: Any) -> dict[str, torch.Tensor]:
    """The metric's zero states (all summed across processes, else an error)."""
    from torchmetrics.utilities.data import dim_zero_sum

    metric.reset()
    defaults = metric.metric_state
    bad = [n for n, v in defaults.items() if metric._reductions.get(n) is not dim_zero_sum
           or not isinstance(v, torch.Tensor)]
    if bad:
        raise UsageError(explain(
            "metric", type(metric).__name__,
            f"its states {bad} are not summed across processes (torchmetrics' "
            "dist_reduce_fx is not 'sum'), so replicas cannot add them up",
            "use the binned variant (e.g. thresholds=100 for AUROC/AveragePrecision/ROC) "
            "or a distrib.metrics metric"))
    return {n: v.detach().clone() for n, v in defaults.items()}


class TorchMetric(Metric):
    """A ``torchmetrics.Metric`` as a Keras-style metric with exact distributed results.

    Args:
        metric: the torchmetrics metric (its own states are used as a per-batch
            calculator; the running states are this object's, in float64).
        name: the logged name (default: the metric's class name in snake case).
    """

    def __init__(self, metric: Any, name: str | None = None) -> None:
        self.metric = metric
        self._zeros = _summed_states(metric)
        self._names = list(self._zeros)
        metric.sync_on_compute = False  # distrib sums the states across replicas itself
        super().__init__(name or _snake(type(metric).__name__))

    def _initial_state(self) -> list[torch.Tensor]:
        return [self._zeros[n].to(torch.float64) for n in self._names]

    def update_state(self, y_true: Any = None, y_pred: Any = None,
                     sample_weight: Any = None) -> None:
        """Accumulate one batch: torchmetrics' ``update(y_pred, y_true)``."""
        if sample_weight is not None:
            raise UsageError(explain(
                "sample_weight", type(sample_weight).__name__,
                f"torchmetrics' {type(self.metric).__name__} takes no sample weights",
                "list it in compile(metrics=...), not weighted_metrics"))
        pred = y_pred if isinstance(y_pred, torch.Tensor) else torch.as_tensor(y_pred)
        metric = self.metric
        if metric.device != pred.device:
            metric.to(pred.device)
        metric.reset()
        metric.update(pred.detach(), torch.as_tensor(y_true, device=pred.device))
        states = self._states(pred.device)
        for state, name in zip(states, self._names):
            state.add_(getattr(metric, name).detach().to(torch.float64))

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        metric = self.metric
        metric.reset()
        for name, state in zip(self._names, states):
            setattr(metric, name, state.to(device=metric.device, dtype=self._zeros[name].dtype))
        with warnings.catch_warnings():  # compute() before update(): these states are given
            warnings.simplefilter("ignore")
            value = metric.compute()
        return torch.as_tensor(value).detach().to(torch.float64)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "metric": repr(self.metric)}
