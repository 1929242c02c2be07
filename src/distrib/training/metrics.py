"""Keras metrics whose state is sums and counts, so distributed results are exact.

A metric keeps float64 state tensors (a total and a count, confusion counts,
...).  On several replicas each keeps its own; the global result is computed
from the *all-reduced* states — (sum of totals) / (sum of counts) — never as a
mean of per-replica means, so uneven and partial batches count exactly.
:func:`global_results` does that for a list of metrics with one all-reduce.

Names accepted by :func:`get` (and ``compile(metrics=[...])``): ``"accuracy"``
/ ``"acc"`` (binary, sparse categorical or categorical, chosen from the loss
and the shapes as Keras does), ``"sparse_categorical_accuracy"``,
``"categorical_accuracy"``, ``"binary_accuracy"``, ``"mse"``, ``"mae"``,
``"precision"``, ``"recall"``, ``"auc"`` and every loss name.

Example:
    >>> import torch
    >>> m = SparseCategoricalAccuracy()
    >>> m.update_state(torch.tensor([0, 1]), torch.tensor([[0.9, 0.1], [0.8, 0.2]]))
    >>> float(m.result())
    0.5
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training import losses as losses_mod
from distrib.training.confusion_metrics import AUC, Precision, Recall
from distrib.training.losses import squeeze_or_expand
from distrib.training.metric_base import (
    Mean,
    MeanMetricWrapper,
    Metric,
    Sum,
    _tensor,
    flat_states,
    global_results,
    results_from_states,
)
from distrib.training.torchmetrics_adapter import TorchMetric, is_torchmetric

__all__ = [
    "Metric", "Mean", "Sum", "MeanMetricWrapper", "Accuracy", "BinaryAccuracy",
    "CategoricalAccuracy", "SparseCategoricalAccuracy", "MeanSquaredError",
    "MeanAbsoluteError", "Precision", "Recall", "AUC", "accuracy", "binary_accuracy",
    "categorical_accuracy", "sparse_categorical_accuracy", "get", "resolve", "check_name",
    "global_results", "results_from_states", "flat_states",
]


# ------------------------------------------------------------ accuracies
def accuracy(y_true: Any, y_pred: Any) -> torch.Tensor:
    """1.0 where ``y_pred == y_true`` exactly (Keras ``accuracy``), per element."""
    t, p = squeeze_or_expand(_tensor(y_true), _tensor(y_pred))
    return (t.to(p.dtype) == p).to(torch.float32)


def binary_accuracy(y_true: Any, y_pred: Any, threshold: float = 0.5) -> torch.Tensor:
    """Per-example fraction of ``(y_pred > threshold) == y_true`` (Keras ``binary_accuracy``).

    Example:
        >>> binary_accuracy(torch.tensor([[1.0], [0.0]]), torch.tensor([[0.7], [0.6]]))
        tensor([1., 0.])
    """
    t, p = squeeze_or_expand(_tensor(y_true), _tensor(y_pred))
    hits = ((p > threshold).to(torch.float32) == t.to(torch.float32)).to(torch.float32)
    return hits.mean(dim=-1) if hits.dim() >= 2 else hits


def categorical_accuracy(y_true: Any, y_pred: Any) -> torch.Tensor:
    """1.0 where ``argmax(y_pred) == argmax(y_true)`` (one-hot labels), per example.

    Example:
        >>> categorical_accuracy(torch.tensor([[0, 1], [1, 0]]), torch.tensor([[.2, .8], [.3, .7]]))
        tensor([1., 0.])
    """
    t, p = _tensor(y_true), _tensor(y_pred)
    return (t.argmax(dim=-1) == p.argmax(dim=-1)).to(torch.float32)


def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> torch.Tensor:
    """1.0 where ``argmax(y_pred) == y_true`` (integer labels), per example.

    Example:
        >>> sparse_categorical_accuracy(torch.tensor([1, 0]), torch.tensor([[.2, .8], [.3, .7]]))
        tensor([1., 0.])
    """
    t, p = _tensor(y_true), _tensor(y_pred)
    if t.dim() == p.dim() and t.shape[-1] == 1:
        t = t.squeeze(-1)
    return (p.argmax(dim=-1) == t.to(torch.long)).to(torch.float32)


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels exactly (Keras ``Accuracy``)."""

    def __init__(self, name: str = "accuracy", dtype: Any = None) -> None:
        super().__init__(accuracy, name, dtype)


class BinaryAccuracy(MeanMetricWrapper):
    """How often ``y_pred > threshold`` matches binary labels (Keras ``BinaryAccuracy``).

    Example:
        >>> m = BinaryAccuracy(threshold=0.0)     # for logits
        >>> m.update_state(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])); float(m.result())
        0.5
    """

    def __init__(self, name: str = "binary_accuracy", dtype: Any = None,
                 threshold: float = 0.5) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise UsageError(explain("BinaryAccuracy(threshold)", threshold, "must be a number",
                                     "pass e.g. threshold=0.5 (0.0 for logits)"))
        super().__init__(binary_accuracy, name, dtype, threshold=threshold)


class CategoricalAccuracy(MeanMetricWrapper):
    """Accuracy with one-hot labels (Keras ``CategoricalAccuracy``)."""

    def __init__(self, name: str = "categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(categorical_accuracy, name, dtype)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """Accuracy with integer labels (Keras ``SparseCategoricalAccuracy``)."""

    def __init__(self, name: str = "sparse_categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(sparse_categorical_accuracy, name, dtype)


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error as a metric (Keras ``metrics.MeanSquaredError``)."""

    def __init__(self, name: str = "mean_squared_error", dtype: Any = None) -> None:
        super().__init__(losses_mod.mean_squared_error, name, dtype)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error as a metric (Keras ``metrics.MeanAbsoluteError``)."""

    def __init__(self, name: str = "mean_absolute_error", dtype: Any = None) -> None:
        super().__init__(losses_mod.mean_absolute_error, name, dtype)


# ------------------------------------------------------------- lookup
_BY_NAME: dict[str, Callable[[str], Metric]] = {
    "sparse_categorical_accuracy": lambda n: SparseCategoricalAccuracy(name=n),
    "categorical_accuracy": lambda n: CategoricalAccuracy(name=n),
    "binary_accuracy": lambda n: BinaryAccuracy(name=n),
    "mse": lambda n: MeanSquaredError(name=n),
    "mean_squared_error": lambda n: MeanSquaredError(name=n),
    "mae": lambda n: MeanAbsoluteError(name=n),
    "mean_absolute_error": lambda n: MeanAbsoluteError(name=n),
    "precision": lambda n: Precision(name=n),
    "recall": lambda n: Recall(name=n),
    "auc": lambda n: AUC(name=n),
    "sparse_categorical_crossentropy": lambda n: MeanMetricWrapper(
        losses_mod.sparse_categorical_crossentropy, n),
    "categorical_crossentropy": lambda n: MeanMetricWrapper(
        losses_mod.categorical_crossentropy, n),
    "binary_crossentropy": lambda n: MeanMetricWrapper(losses_mod.binary_crossentropy, n),
    "huber": lambda n: MeanMetricWrapper(losses_mod.huber, n),
}

_SHAPE_DEPENDENT = ("accuracy", "acc", "crossentropy", "ce")


def get(identifier: Any) -> Metric:
    """Resolve a metric name, :class:`Metric` instance or class, or function ``fn(y_true, y_pred)``.

    ``"accuracy"``/``"acc"`` depend on the data: use :func:`resolve` for those.

    Example:
        >>> get("mae").name
        'mae'
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return identifier()
    if isinstance(identifier, str):
        check_name(identifier)
        key = identifier.lower()
        if key not in _BY_NAME:
            raise UsageError(explain("metric", identifier, "depends on the labels and "
                                     "predictions", "use resolve(name, y_true, y_pred)"))
        return _BY_NAME[key](identifier)
    if isinstance(identifier, losses_mod.Loss):  # its per-example values, averaged
        return MeanMetricWrapper(identifier.call, name=identifier.name)
    if is_torchmetric(identifier):
        return TorchMetric(identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise InvalidTypeError(explain("metric", identifier, "must be a name, a Metric or a "
                                   "callable", "pass e.g. metrics=['accuracy']"))


def check_name(name: str) -> None:
    """Raise unless ``name`` is a metric name :func:`resolve` knows (``compile`` calls it).

    Example:
        >>> check_name("acc")
    """
    if name.lower() not in _BY_NAME and name.lower() not in _SHAPE_DEPENDENT:
        raise UsageError(explain(
            "metric", name, f"Unknown metric function: {name!r}; the metric names are "
            + ", ".join(sorted((*_BY_NAME, *_SHAPE_DEPENDENT))),
            "pass one of those names, a distrib.metrics.Metric or a function "
            "(y_true, y_pred) -> per-example values"))


def _kind_from_loss(loss: Any) -> tuple[str | None, bool]:
    """("binary" | "sparse" | "categorical" | None, from_logits) suggested by a compiled loss."""
    inner = getattr(loss, "module", None)
    if isinstance(loss, losses_mod.BinaryCrossentropy):
        return "binary", loss.from_logits
    if isinstance(loss, losses_mod.SparseCategoricalCrossentropy):
        return "sparse", loss.from_logits
    if isinstance(loss, losses_mod.CategoricalCrossentropy):
        return "categorical", loss.from_logits
    if isinstance(inner, torch.nn.BCEWithLogitsLoss):
        return "binary", True
    if isinstance(inner, torch.nn.BCELoss):
        return "binary", False
    if isinstance(inner, torch.nn.CrossEntropyLoss):
        return None, True
    return None, False


def resolve(identifier: Any, y_true: torch.Tensor, y_pred: torch.Tensor, loss: Any = None
            ) -> Metric:
    """Like :func:`get`, choosing the variant of ``"accuracy"``/``"crossentropy"`` as Keras does.

    Predictions with a last dimension of 1 (or of rank 1) → binary; labels of lower
    rank than predictions, or labels ``[..., 1]`` against several classes → sparse
    categorical; else categorical.  A compiled binary/sparse/categorical
    cross-entropy decides first, and a binary cross-entropy on logits sets the
    accuracy threshold to 0 (a logit > 0 is a probability > 0.5).

    Example:
        >>> resolve("accuracy", torch.zeros(4), torch.zeros(4, 10)).__class__.__name__
        'SparseCategoricalAccuracy'
    """
    if not (isinstance(identifier, str) and identifier.lower() in _SHAPE_DEPENDENT):
        return get(identifier)
    name = identifier
    kind, from_logits = _kind_from_loss(loss)
    if kind is None:
        rt, rp = y_true.dim(), y_pred.dim()
        last_t = y_true.shape[-1] if rt else 1
        last_p = y_pred.shape[-1] if rp else 1
        if rp <= 1 or last_p == 1:
            kind = "binary"
        elif rt < rp or (last_t == 1 and last_p > 1):
            kind = "sparse"
        else:
            kind = "categorical"
    if identifier.lower() in ("accuracy", "acc"):
        if kind == "binary":
            return BinaryAccuracy(name=name, threshold=0.0 if from_logits else 0.5)
        if kind == "sparse":
            return SparseCategoricalAccuracy(name=name)
        return CategoricalAccuracy(name=name)
    fn = {"binary": losses_mod.binary_crossentropy,
          "sparse": losses_mod.sparse_categorical_crossentropy,
          "categorical": losses_mod.categorical_crossentropy}[kind]
    return MeanMetricWrapper(fn, name)
