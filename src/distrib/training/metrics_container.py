"""The compiled metrics of ``Model.compile``, resolved and built at the first batch.

``metrics`` are computed without sample weights, ``weighted_metrics`` with them (and
with the class weights of ``fit``); names are checked at ``compile`` and resolved
(``"accuracy"`` to its variant for the loss and the shapes) at the first batch.

Example:
    >>> import torch
    >>> mc = MetricsContainer(["mae"])
    >>> mc.update_state(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]))
    >>> [(m.name, float(m.result())) for m in mc.metrics]
    [('mae', 2.0)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from distrib import nest
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training import metrics as metrics_mod
from distrib.training.metrics import Metric
from distrib.training.structure import flatten_outputs, per_output

if TYPE_CHECKING:
    from distrib.training.compile_utils import LossesContainer

__all__ = ["MetricsContainer"]


class MetricsContainer:
    """The compiled metrics, resolved and built at the first batch (Keras' rules).

    ``metrics`` are computed without sample weights, ``weighted_metrics`` with them
    (and with the class weights of ``fit``).  A weighted metric whose name an
    unweighted one already has is renamed ``weighted_<name>``; with several
    outputs every name starts with the output's name.

    Args:
        metrics: a list applied to every output, or a dict ``{output: metrics}``.
        losses: the compiled loss container (its losses choose ``"accuracy"``'s variant).
        weighted_metrics: the same forms as ``metrics``.

    Example:
        >>> mc = MetricsContainer(["mae"], weighted_metrics=["mae"])
        >>> mc.update_state(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]),
        ...                 sample_weight=torch.tensor([3.0, 1.0]))
        >>> {m.name: float(m.result()) for m in mc.metrics}
        {'mae': 2.0, 'weighted_mae': 1.5}
    """

    def __init__(self, metrics: Any, losses: LossesContainer | None = None,
                 weighted_metrics: Any = None) -> None:
        _check_metric_names(metrics, weighted_metrics)
        self._spec = metrics
        self._weighted_spec = weighted_metrics
        self._losses = losses
        self._built: list[tuple[list[Metric], list[Metric]]] | None = None
        self._empty = _no_metrics(metrics) and _no_metrics(weighted_metrics)

    @property
    def built(self) -> bool:
        return self._built is not None

    @property
    def empty(self) -> bool:
        """True when no metric was compiled (nothing to update per step)."""
        return self._empty

    @property
    def metrics(self) -> list[Metric]:
        """Every compiled metric: per output, the unweighted then the weighted ones."""
        return [m for plain, weighted in (self._built or []) for m in (*plain, *weighted)]

    def _build(self, y_true: Any, y_pred: Any) -> None:
        names, preds = flatten_outputs(y_pred)
        multi = len(names) > 1
        trues = per_output(y_true, names, "y") if multi else [y_true]
        losses = self._losses.losses if self._losses is not None else []
        plain_specs = self._specs(self._spec, names)
        weighted_specs = self._specs(self._weighted_spec, names)
        taken: set[str] = set()
        built: list[tuple[list[Metric], list[Metric]]] = []
        for i, pred in enumerate(preds):
            loss = losses[i] if i < len(losses) else None
            true = _as_t(trues[i] if trues[i] is not None else pred)
            plain = [metrics_mod.resolve(item, true, _as_t(pred), loss)
                     for item in plain_specs[i]]
            weighted = [metrics_mod.resolve(item, true, _as_t(pred), loss)
                        for item in weighted_specs[i]]
            _name_metrics(names[i] if multi else None, plain, weighted, taken)
            built.append((plain, weighted))
        self._built = built

    @staticmethod
    def _specs(spec: Any, names: list[str]) -> list[list[Any]]:
        per = per_output(spec, names, "metrics") if isinstance(spec, dict) \
            else [spec] * len(names)
        return [[] if s is None else (list(s) if isinstance(s, (list, tuple)) else [s])
                for s in per]

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Update every metric with one batch (sample weights reach the weighted ones only)."""
        if self._built is None:
            self._build(y_true, y_pred)
        assert self._built is not None
        names, preds = flatten_outputs(y_pred)
        multi = len(names) > 1
        trues = per_output(y_true, names, "y") if multi else [y_true]
        weights = per_output(sample_weight, names, "sample_weight") if multi \
            else [sample_weight]
        for (plain, weighted), true, pred, w in zip(self._built, trues, preds, weights):
            if true is None:
                continue
            for m in plain:
                m.update_state(true, pred)
            for m in weighted:
                m.update_state(true, pred, sample_weight=w)

    def reset_state(self) -> None:
        for m in self.metrics:
            m.reset_state()


def _no_metrics(spec: Any) -> bool:
    return spec is None or (isinstance(spec, (list, tuple, dict)) and not spec)


def _name_metrics(output: str | None, plain: list[Metric], weighted: list[Metric],
                  taken: set[str]) -> None:
    """Keras' names: ``<output>_`` in front with several outputs; ``weighted_`` in front of
    a weighted metric whose name is taken; two metrics with one name raise."""
    prefix = f"{output}_" if output is not None else ""
    for m in plain:
        m.name = prefix + m.name
        if m.name in taken:
            raise UsageError(explain("metrics", m.name, f"Found two metrics with the same "
                                     f"name: {m.name}. All the metrics added to the model "
                                     "need to have unique names", "give them distinct names"))
        taken.add(m.name)
    for m in weighted:
        name = prefix + m.name
        if name in taken:
            name = f"{prefix}weighted_{m.name}"
        if name in taken:
            raise UsageError(explain("weighted_metrics", name, "Found two weighted metrics "
                                     f"with the same name: {name}.All the metrics added to "
                                     "the model need to have unique names",
                                     "give them distinct names"))
        m.name = name
        taken.add(name)


def _check_metric_names(metrics: Any, weighted: Any) -> None:
    """Every metric name known now (at ``compile``), and no Metric object given twice."""
    for what, spec in (("metrics", metrics), ("weighted_metrics", weighted)):
        if spec is not None and not isinstance(spec, (list, tuple, dict)):
            raise InvalidTypeError(explain(what, spec, f"Type of `{what}` argument not "
                                           "understood. Expected a list or dictionary",
                                           f"pass a list, e.g. {what}=[{spec!r}]"))
    seen: list[Metric] = []
    for item in [*nest.flatten(metrics), *nest.flatten(weighted)]:
        if isinstance(item, str):
            metrics_mod.check_name(item)
        elif item is not None and not isinstance(item, Metric) and not callable(item):
            raise InvalidTypeError(explain("metric", item, "must be a metric name, a "
                                           "distrib.metrics.Metric or a function (y_true, "
                                           "y_pred) -> per-example values",
                                           "pass e.g. metrics=['accuracy']"))
        elif isinstance(item, Metric):
            if any(item is m for m in seen):
                raise UsageError(explain(
                    "metrics / weighted_metrics", item, "Found duplicated metrics object in "
                    "the user provided metrics and weighted metrics. This will cause the "
                    "same metric object to be updated multiple times, and report wrong "
                    "results", "give each list its own metric object"))
            seen.append(item)


def _as_t(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
