"""The metrics of a ``distrib.Model``: which metrics it has, their results and states.

A model's metrics are its loss trackers (``loss`` and one per output), the compiled
metrics, then any :class:`~distrib.training.metrics.Metric` the model holds as an
attribute, in that order (Keras' ``model.metrics``).  The loss trackers and compiled
metrics are built at the first batch, as in Keras; metric states restored from a
checkpoint before then are applied as soon as each metric exists, before its first
read.

Example::

    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.fit(x, y)
    model.metrics_names          # ["loss", "mae"]
    model.get_metrics_result()   # {"loss": ..., "mae": ...}, global values
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from distrib import nest
from distrib.training.compile_utils import LossesContainer, MetricsContainer
from distrib.training.metrics import Metric
from distrib.training.model_state import MetricStates, TrainCounter

__all__ = ["MetricResults", "ModelMetrics"]


class MetricResults(Mapping[str, Any]):
    """The model's metric results, computed on access (what ``compute_metrics`` returns).

    ``fit`` does not read these values: it logs the global results (all-reduced
    states) instead, so returning this costs nothing per step.
    """

    def __init__(self, model: ModelMetrics) -> None:
        self._model = model

    def _by_name(self) -> dict[str, Metric]:
        return {m.name: m for m in self._model.metrics}

    def __getitem__(self, key: str) -> Any:
        return float(self._by_name()[key].result())

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name())

    def __len__(self) -> int:
        return len(self._by_name())


class ModelMetrics(nn.Module):
    """Keras' metric API of ``distrib.Model`` (``metrics``, ``reset_metrics``, ...)."""

    module: nn.Module | None
    optimizer: Any
    compiled_loss: LossesContainer | None
    compiled_metrics: MetricsContainer | None
    _restored_metrics: dict[str, list[torch.Tensor]]

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any
                        ) -> Mapping[str, Any]:
        """Update the compiled metrics with one batch; returns the model's results."""
        compiled = self.compiled_metrics
        if compiled is not None and y is not None and not compiled.empty:
            compiled.update_state(y, _detach(y_pred), sample_weight)
        results = self.__dict__.get("_metric_results")  # a live view: one per model will do
        if results is None:
            results = self.__dict__["_metric_results"] = MetricResults(self)
        return results

    def _metric_list(self, built_only: bool) -> list[Metric]:
        out: list[Metric] = []
        if self.compiled_loss is not None and (self.compiled_loss.built or not built_only):
            out.extend(self.compiled_loss.metrics)
        if self.compiled_metrics is not None:
            out.extend(self.compiled_metrics.metrics)
        for value in vars(self).values():
            if isinstance(value, Metric) and all(value is not m for m in out):
                out.append(value)
        return out

    def _apply_restored_metrics(self) -> None:
        for m in self._metric_list(built_only=True):
            if m.name in self._restored_metrics:
                m.assign_state_tensors(self._restored_metrics.pop(m.name))

    @property
    def metrics(self) -> list[Metric]:
        """The loss trackers, the compiled metrics, then Metric attributes of the model."""
        if self._restored_metrics:
            self._apply_restored_metrics()
        return self._metric_list(built_only=False)

    def built_metrics(self) -> list[Metric]:
        """The metrics that exist already (loss trackers and compiled metrics are built
        at the first batch)."""
        if self._restored_metrics:
            self._apply_restored_metrics()
        return self._metric_list(built_only=True)

    def restore_metric_states(self, states: dict[str, list[torch.Tensor]]) -> None:
        """Set the metrics' accumulated states (a checkpoint restore); metrics not built
        yet receive theirs when they are."""
        self._restored_metrics = dict(states)
        self._apply_restored_metrics()

    def checkpoint_children(self) -> dict[str, Any]:
        """What ``distrib.Checkpoint(model=model)`` saves: module, optimizer, metric
        states and the train-step counter.

        Example::

            distrib.Checkpoint(model=model).save("runs/ckpt")
        """
        return {"module": self.module, "optimizer": self.optimizer,
                "metrics": MetricStates(self), "train_counter": TrainCounter(self)}

    @property
    def metrics_names(self) -> list[str]:
        """The names of :attr:`metrics` (``["loss", "accuracy"]``)."""
        return [m.name for m in self.metrics]

    def reset_metrics(self) -> None:
        """Reset every metric's state (done at the start of each epoch and evaluation)."""
        self._restored_metrics = {}
        for m in self.metrics:
            m.reset_state()

    def get_metrics_result(self) -> dict[str, float]:
        """The current metric results (global values under a strategy)."""
        return dict(MetricResults(self))


def _detach(value: Any) -> Any:
    return nest.map_structure(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, value)
