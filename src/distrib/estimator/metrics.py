"""``tf.compat.v1.metrics`` for ``eval_metric_ops``: each returns ``(value, update_op)``.

Call them in ``model_fn`` as in TensorFlow::

    eval_metric_ops = {
        "accuracy": distrib.estimator.metrics.accuracy(labels, predicted_classes),
        "auc": distrib.estimator.metrics.auc(labels, probabilities),
    }

The metric's state lives in a float64 metric object, made on the first call of
``model_fn`` and reused on the later ones; ``update_op`` adds this step's batch to it
(the Estimator runs it once per evaluation step, and a hook that fetches it runs it),
``value`` reads the result.  ``evaluate`` combines the states of every replica with
one all-reduce, so results are exact across replicas, uneven last batches included.

Keras-style metric objects (``distrib.metrics.Accuracy()`` ...) are accepted in
``eval_metric_ops`` too: update them in ``model_fn`` and pass the object.

Example:
    >>> value, update_op = accuracy(torch.tensor([1, 0, 1]), torch.tensor([1, 1, 1]))
    >>> round(float(update_op()), 4), round(float(value.result()), 4)
    (0.6667, 0.6667)
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from distrib.errors import UsageError, explain
from distrib.training.confusion_metrics import AUC, Precision, Recall
from distrib.training.losses import squeeze_or_expand
from distrib.training.metric_base import Mean, Metric, Sum

__all__ = [
    "MetricOp", "MetricValue", "UpdateOp", "accuracy", "mean", "mean_squared_error",
    "mean_absolute_error", "root_mean_squared_error", "precision", "recall", "auc",
    "true_positives", "false_positives", "true_negatives", "false_negatives",
    "precision_at_thresholds", "recall_at_thresholds", "metric_of", "run_update_ops",
]


class MetricValue:
    """The ``value`` half of a metric op: reads the metric's result.

    ``result()`` is this replica's; ``Estimator.evaluate`` reports the value over every
    replica.
    """

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def result(self) -> torch.Tensor:
        """The result of the batches added so far on this replica."""
        return self.metric.result()

    def __repr__(self) -> str:
        return f"MetricValue({self.metric.name})"


class UpdateOp:
    """The ``update_op`` half: calling it adds the step's batch (once) and returns the result."""

    def __init__(self, metric: Metric, args: tuple[Any, ...], weights: Any) -> None:
        self.metric = metric
        self._args = args
        self._weights = weights
        self._done = False

    def __call__(self) -> torch.Tensor:
        if not self._done:
            self._done = True
            self.metric.update_state(*self._args, sample_weight=self._weights)
        return self.metric.result()

    def __repr__(self) -> str:
        return f"UpdateOp({self.metric.name})"


class MetricOp(NamedTuple):
    """``(value, update_op)`` as ``tf.compat.v1.metrics`` returns it."""

    value: MetricValue
    update_op: UpdateOp


def run_update_ops(spec: Any) -> None:
    """Run the ``update_op`` of every ``(value, update_op)`` pair of ``spec.eval_metric_ops``
    (once per step, inside the replica function)."""
    for entry in (spec.eval_metric_ops or {}).values():
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and callable(entry[1]):
            entry[1]()


def metric_of(entry: Any, key: str) -> Metric:
    """The metric object behind an ``eval_metric_ops`` entry (error naming the entry)."""
    if isinstance(entry, Metric):
        return entry
    value = entry[0] if isinstance(entry, (tuple, list)) and len(entry) == 2 else entry
    if isinstance(value, (MetricValue, UpdateOp)):
        return value.metric
    if isinstance(value, Metric):
        return value
    raise UsageError(explain(
        f"eval_metric_ops[{key!r}]", entry, "the value must come from "
        "distrib.estimator.metrics (or be a metric object): a plain tensor is one batch's "
        "value, not a metric over the evaluation", "use e.g. "
        "distrib.estimator.metrics.mean(values), or distrib.metrics.Mean()"))


def _op(metric: Metric, weights: Any, *args: Any) -> MetricOp:
    return MetricOp(MetricValue(metric), UpdateOp(metric, args, weights))


def _pair(labels: Any, predictions: Any) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.as_tensor(predictions).detach()
    t = torch.as_tensor(labels).to(p.device)
    t, p = squeeze_or_expand(t, p)
    return t, p


def _weights_like(weights: Any, values: torch.Tensor) -> torch.Tensor | None:
    if weights is None:
        return None
    w = torch.as_tensor(weights).to(values.device, torch.float64)
    while w.dim() < values.dim():
        w = w.unsqueeze(-1)
    return torch.broadcast_to(w, values.shape)


class _ElementMean(Mean):
    """Mean over every element of ``fn(labels, predictions)``."""

    def __init__(self, fn: Any, name: str, root: bool = False) -> None:
        super().__init__(name=name)
        self._fn, self._root = fn, root

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        values = self._fn(*args).to(torch.float64)
        super().update_state(values, _weights_like(sample_weight, values))

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        value = super().result_from(states)
        return value.sqrt() if self._root else value


class _Count(Sum):
    """Weighted count of elements where ``fn(labels, predictions)`` holds."""

    def __init__(self, fn: Any, name: str) -> None:
        super().__init__(name=name)
        self._fn = fn

    def update_state(self, labels: Any, predictions: Any,  # type: ignore[override]
                     sample_weight: Any = None) -> None:
        hits = self._fn(*_pair(labels, predictions)).to(torch.float64)
        super().update_state(hits, _weights_like(sample_weight, hits))


class _BoolRatio(Metric):
    """tp / (tp + other) with labels and predictions read as booleans (v1 semantics)."""

    def __init__(self, other: str, name: str) -> None:
        super().__init__(name=name)
        self._other = other

    def _initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)]

    def update_state(self, labels: Any, predictions: Any, sample_weight: Any = None) -> None:
        t, p = _pair(labels, predictions)
        t, p = t.bool(), p.bool()
        w = _weights_like(sample_weight, p.to(torch.float64))
        weight = w if w is not None else torch.ones(p.shape, dtype=torch.float64,
                                                    device=p.device)
        other = (p & ~t) if self._other == "fp" else (~p & t)
        tp_state, other_state = self._states(p.device)
        tp_state.add_((weight * (p & t)).sum())
        other_state.add_((weight * other).sum())

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        tp, other = states
        total = tp + other
        return torch.where(total > 0, tp / torch.where(total > 0, total, torch.ones_like(total)),
                           torch.zeros_like(tp))


def accuracy(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
             updates_collections: Any = None, name: str | None = None) -> MetricOp:
    """Fraction of elements where ``predictions == labels`` (class ids, not scores)."""
    return _op(_ElementMean(lambda t, p: (t.to(p.dtype) == p), name or "accuracy"),
               weights, *_pair(labels, predictions))


def mean(values: Any, weights: Any = None, metrics_collections: Any = None,
         updates_collections: Any = None, name: str | None = None) -> MetricOp:
    """The (weighted) mean of every element of ``values``."""
    v = torch.as_tensor(values).detach()
    return _op(_ElementMean(lambda x: x, name or "mean"), weights, v)


def mean_squared_error(labels: Any, predictions: Any, weights: Any = None,
                       metrics_collections: Any = None, updates_collections: Any = None,
                       name: str | None = None) -> MetricOp:
    """Mean over elements of ``(predictions - labels) ** 2``."""
    fn = _ElementMean(lambda t, p: (p.double() - t.double()) ** 2, name or "mean_squared_error")
    return _op(fn, weights, *_pair(labels, predictions))


def root_mean_squared_error(labels: Any, predictions: Any, weights: Any = None,
                            metrics_collections: Any = None, updates_collections: Any = None,
                            name: str | None = None) -> MetricOp:
    """Square root of :func:`mean_squared_error`."""
    fn = _ElementMean(lambda t, p: (p.double() - t.double()) ** 2,
                      name or "root_mean_squared_error", root=True)
    return _op(fn, weights, *_pair(labels, predictions))


def mean_absolute_error(labels: Any, predictions: Any, weights: Any = None,
                        metrics_collections: Any = None, updates_collections: Any = None,
                        name: str | None = None) -> MetricOp:
    """Mean over elements of ``|predictions - labels|``."""
    fn = _ElementMean(lambda t, p: (p.double() - t.double()).abs(),
                      name or "mean_absolute_error")
    return _op(fn, weights, *_pair(labels, predictions))


def precision(labels: Any, predictions: Any, weights: Any = None,
              metrics_collections: Any = None, updates_collections: Any = None,
              name: str | None = None) -> MetricOp:
    """tp / (tp + fp), labels and predictions read as booleans (non-zero is positive)."""
    return _op(_BoolRatio("fp", name or "precision"), weights, labels, predictions)


def recall(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
           updates_collections: Any = None, name: str | None = None) -> MetricOp:
    """tp / (tp + fn), labels and predictions read as booleans."""
    return _op(_BoolRatio("fn", name or "recall"), weights, labels, predictions)


def _counter(kind: str) -> Any:
    tests = {"true_positives": lambda t, p: t.bool() & p.bool(),
             "false_positives": lambda t, p: ~t.bool() & p.bool(),
             "true_negatives": lambda t, p: ~t.bool() & ~p.bool(),
             "false_negatives": lambda t, p: t.bool() & ~p.bool()}

    def metric_fn(labels: Any, predictions: Any, weights: Any = None,
                  metrics_collections: Any = None, updates_collections: Any = None,
                  name: str | None = None) -> MetricOp:
        return _op(_Count(tests[kind], name or kind), weights, labels, predictions)

    metric_fn.__name__ = metric_fn.__qualname__ = kind
    metric_fn.__doc__ = f"Weighted count of {kind.replace('_', ' ')} (booleans, as TF's)."
    return metric_fn


true_positives = _counter("true_positives")
false_positives = _counter("false_positives")
true_negatives = _counter("true_negatives")
false_negatives = _counter("false_negatives")

_SUMMATION = {"trapezoidal": "interpolation", "careful_interpolation": "interpolation",
              "minoring": "minoring", "majoring": "majoring"}


def auc(labels: Any, predictions: Any, weights: Any = None, num_thresholds: int = 200,
        metrics_collections: Any = None, updates_collections: Any = None, curve: str = "ROC",
        name: str | None = None, summation_method: str = "trapezoidal",
        thresholds: Sequence[float] | None = None) -> MetricOp:
    """Area under the ROC or PR curve of scores in [0, 1] (``summation_method`` as TF's)."""
    if summation_method not in _SUMMATION:
        raise UsageError(explain("summation_method", summation_method, "must be one of "
                                 f"{sorted(_SUMMATION)}", "use 'trapezoidal'"))
    metric = AUC(num_thresholds=num_thresholds, curve=curve, name=name or "auc",
                 summation_method=_SUMMATION[summation_method], thresholds=thresholds)
    return _op(metric, weights, *_pair(labels, predictions))


def precision_at_thresholds(labels: Any, predictions: Any, thresholds: Sequence[float],
                            weights: Any = None, metrics_collections: Any = None,
                            updates_collections: Any = None, name: str | None = None
                            ) -> MetricOp:
    """Precision for each threshold (a prediction is positive when above it)."""
    metric = Precision(thresholds=list(thresholds), name=name or "precision_at_thresholds")
    return _op(metric, weights, *_pair(labels, predictions))


def recall_at_thresholds(labels: Any, predictions: Any, thresholds: Sequence[float],
                         weights: Any = None, metrics_collections: Any = None,
                         updates_collections: Any = None, name: str | None = None
                         ) -> MetricOp:
    """Recall for each threshold (a prediction is positive when above it)."""
    metric = Recall(thresholds=list(thresholds), name=name or "recall_at_thresholds")
    return _op(metric, weights, *_pair(labels, predictions))
