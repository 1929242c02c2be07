"""Confusion-count metrics: ``Precision``, ``Recall`` and ``AUC`` (Keras semantics).

Their state is weighted true/false positive/negative counts per threshold, so the
distributed result (from all-reduced counts) is exact.

Example:
    >>> m = Precision()
    >>> m.update_state(torch.tensor([0, 1, 1, 1]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
    >>> round(float(m.result()), 4)
    0.6667
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from distrib.errors import UsageError, explain
from distrib.training import losses as losses_mod
from distrib.training.losses import squeeze_or_expand
from distrib.training.metric_base import (
    _STATE_DTYPE,
    Metric,
    _broadcast_weight,
    _safe_div,
    _tensor,
    _zeros,
)

__all__ = ["Precision", "Recall", "AUC"]


def _labels_and_scores(y_true: Any, y_pred: Any, class_id: int | None, top_k: int | None,
                       sample_weight: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pred = _tensor(y_pred).detach()
    if not pred.is_floating_point():
        pred = pred.float()
    true = _tensor(y_true).to(pred.device)
    true, pred = squeeze_or_expand(true, pred)
    if top_k is not None:
        kth = pred.topk(min(top_k, pred.shape[-1]), dim=-1).values[..., -1:]
        pred = torch.where(pred >= kth, pred, torch.full_like(pred, float("-inf")))
    if sample_weight is None:
        weight = torch.ones(pred.shape, dtype=_STATE_DTYPE, device=pred.device)
    else:
        weight = _broadcast_weight(sample_weight, pred.to(_STATE_DTYPE))
    if class_id is not None:
        true, pred, weight = true[..., class_id], pred[..., class_id], weight[..., class_id]
    labels = (true != 0).reshape(-1)
    return labels, pred.reshape(-1).to(_STATE_DTYPE), weight.reshape(-1)


def _thresholds_of(thresholds: float | Sequence[float] | None, default: float) -> torch.Tensor:
    if thresholds is None:
        return torch.tensor([default], dtype=_STATE_DTYPE)
    values = [thresholds] if isinstance(thresholds, (int, float)) else list(thresholds)
    if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0
           for t in values):
        raise UsageError(explain("thresholds", thresholds, "Threshold values must be in "
                                 f"[0, 1]. Received: {values}",
                                 "pass thresholds between 0 and 1, e.g. 0.5"))
    return torch.tensor([float(t) for t in values], dtype=_STATE_DTYPE)


def _confusion(labels: torch.Tensor, scores: torch.Tensor, weight: torch.Tensor,
               thresholds: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Weighted tp, fp, tn, fn per threshold (a prediction is positive when > threshold)."""
    above = (scores.unsqueeze(1) > thresholds.to(scores.device).unsqueeze(0)).to(_STATE_DTYPE)
    pos = weight * labels.to(_STATE_DTYPE)
    neg = weight * (~labels).to(_STATE_DTYPE)
    tp = pos @ above
    fp = neg @ above
    return tp, fp, neg.sum() - fp, pos.sum() - tp


class _ThresholdMetric(Metric):
    def __init__(self, thresholds: float | Sequence[float] | None, top_k: int | None,
                 class_id: int | None, name: str | None, dtype: Any) -> None:
        super().__init__(name, dtype)
        for what, value, low in (("top_k", top_k, 1), ("class_id", class_id, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < low):
                raise UsageError(explain(f"{type(self).__name__}({what})", value,
                                         f"must be an int >= {low} or None",
                                         f"pass e.g. {what}={low}, or leave it out"))
        self.top_k, self.class_id = top_k, class_id
        default = 0.5 if top_k is None else float("-inf")
        self.thresholds = _thresholds_of(thresholds, default)
        self._scalar = thresholds is None or isinstance(thresholds, (int, float))

    def _initial_state(self) -> list[torch.Tensor]:
        n = self.thresholds.numel()
        return [_zeros(n), _zeros(n)]

    def _update(self, y_true: Any, y_pred: Any, sample_weight: Any) -> tuple[torch.Tensor, ...]:
        labels, scores, weight = _labels_and_scores(y_true, y_pred, self.class_id, self.top_k,
                                                    sample_weight)
        return _confusion(labels, scores, weight, self.thresholds)

    def _shape(self, value: torch.Tensor) -> torch.Tensor:
        return value[0] if self._scalar else value

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "thresholds": self.thresholds.tolist(),
                "top_k": self.top_k, "class_id": self.class_id}


class _RatioMetric(_ThresholdMetric):
    """tp / (tp + other), where ``other`` is the confusion count at ``_OTHER`` (fp or fn)."""

    _OTHER = 1  # index in (tp, fp, tn, fn)

    def __init__(self, thresholds: float | Sequence[float] | None = None,
                 top_k: int | None = None, class_id: int | None = None,
                 name: str | None = None, dtype: Any = None) -> None:
        super().__init__(thresholds, top_k, class_id, name, dtype)  # None: "precision"...

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        counts = self._update(y_true, y_pred, sample_weight)
        s_tp, s_other = self._states(counts[0].device)
        s_tp.add_(counts[0])
        s_other.add_(counts[self._OTHER])

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        return self._shape(_safe_div(states[0], states[0] + states[1]))


class Precision(_RatioMetric):
    """tp / (tp + fp) at ``thresholds`` (default 0.5) (Keras ``Precision``).

    Example:
        >>> m = Precision()
        >>> m.update_state(torch.tensor([0, 1, 1, 1]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
        >>> round(float(m.result()), 4)
        0.6667
    """


class Recall(_RatioMetric):
    """tp / (tp + fn) at ``thresholds`` (default 0.5) (Keras ``Recall``).

    Example:
        >>> m = Recall()
        >>> m.update_state(torch.tensor([0, 1, 1, 1]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
        >>> round(float(m.result()), 4)
        0.6667
    """

    _OTHER = 3  # false negatives


class AUC(Metric):
    """Area under the ROC or PR curve from confusion counts at fixed thresholds (Keras ``AUC``).

    Args:
        num_thresholds: thresholds spread evenly over [0, 1] (Keras' 200).
        curve: ``"ROC"`` or ``"PR"``.
        summation_method: ``"interpolation"``, ``"minoring"`` or ``"majoring"``.
        thresholds: explicit thresholds (0 - eps and 1 + eps are added).
        from_logits: apply a sigmoid to predictions first.

    Example:
        >>> m = AUC()
        >>> m.update_state(torch.tensor([0, 0, 1, 1]), torch.tensor([0.1, 0.4, 0.35, 0.8]))
        >>> round(float(m.result()), 2)
        0.75
    """

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC",
                 summation_method: str = "interpolation", name: str | None = None,
                 dtype: Any = None, thresholds: Sequence[float] | None = None,
                 multi_label: bool = False, from_logits: bool = False) -> None:
        super().__init__(name or "auc", dtype)
        self.curve = curve.upper()
        self.summation_method = summation_method.lower()
        if self.curve not in ("ROC", "PR"):
            raise UsageError(explain("curve", curve, "must be 'ROC' or 'PR'", "pick one"))
        if self.summation_method not in ("interpolation", "minoring", "majoring"):
            raise UsageError(explain("summation_method", summation_method, "must be "
                                     "'interpolation', 'minoring' or 'majoring'", "pick one"))
        if multi_label:
            raise UsageError(explain("multi_label", multi_label, "only the single-label AUC "
                                     "(all labels flattened) is available",
                                     "use one AUC(class_id-sliced) metric per label"))
        eps = losses_mod.EPSILON
        if thresholds is not None:
            inner = sorted(float(t) for t in thresholds)
        else:
            if num_thresholds <= 1:
                raise UsageError(explain("num_thresholds", num_thresholds, "must be > 1",
                                         "use the default 200"))
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        self.thresholds = torch.tensor([0.0 - eps, *inner, 1.0 + eps], dtype=_STATE_DTYPE)
        self.num_thresholds = self.thresholds.numel()
        self.from_logits = from_logits

    def _initial_state(self) -> list[torch.Tensor]:
        n = self.num_thresholds
        return [_zeros(n), _zeros(n), _zeros(n), _zeros(n)]

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        pred = _tensor(y_pred).detach()
        if self.from_logits:
            pred = torch.sigmoid(pred.float())
        labels, scores, weight = _labels_and_scores(y_true, pred, None, None, sample_weight)
        for state, value in zip(self._states(scores.device),
                                _confusion(labels, scores, weight, self.thresholds)):
            state.add_(value)

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        tp, fp, tn, fn = states
        n = self.num_thresholds
        if self.curve == "PR" and self.summation_method == "interpolation":
            return _interpolate_pr_auc(tp, fp, fn)
        recall = _safe_div(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _safe_div(fp, fp + tn), recall
        else:
            x, y = recall, _safe_div(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[: n - 1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = torch.minimum(y[: n - 1], y[1:])
        else:
            heights = torch.maximum(y[: n - 1], y[1:])
        return ((x[: n - 1] - x[1:]) * heights).sum()


def _interpolate_pr_auc(tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
    """Davis & Goadrich interpolation of the PR curve (Keras ``interpolate_pr_auc``)."""
    dtp = tp[:-1] - tp[1:]
    p = tp + fp
    dp = p[:-1] - p[1:]
    prec_slope = _safe_div(dtp, dp.clamp(min=0))
    intercept = tp[1:] - prec_slope * p[1:]
    both = (p[:-1] > 0) & (p[1:] > 0)
    ratio = torch.where(both, _safe_div(p[:-1], p[1:].clamp(min=0)), torch.ones_like(p[1:]))
    increment = _safe_div(prec_slope * (dtp + intercept * torch.log(ratio)),
                          (tp[1:] + fn[1:]).clamp(min=0))
    return increment.sum()
