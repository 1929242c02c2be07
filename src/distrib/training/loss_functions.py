"""Keras' loss functions for PyTorch tensors: one value per example.

Each function takes labels and predictions (tensors, arrays or numbers) and returns
one loss value per example, following Keras' shapes: a trailing dimension of size 1
on one side only is squeezed (labels ``[B]`` against predictions ``[B, 1]``), and
regression and binary losses average over the last axis of rank >= 2 tensors.  The
classes of :mod:`distrib.training.losses` reduce these values.

Example:
    >>> import torch
    >>> mean_squared_error(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 0.0]]))
    tensor([2.5000])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.class_ids import class_cross_entropy, one_hot_labels_error

__all__ = [
    "EPSILON", "ShapeMismatchError", "squeeze_or_expand", "as_tensor", "last_axis_mean",
    "check_shapes",
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "mean_squared_error", "mean_absolute_error", "huber", "mse", "mae", "MSE", "MAE",
]


EPSILON = 1e-7
"""Keras' ``backend.epsilon()``: probabilities are clipped to ``[EPSILON, 1 - EPSILON]``."""


def squeeze_or_expand(y_true: torch.Tensor, y_pred: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Squeeze a trailing size-1 dimension present on one side only (Keras' rule).

    Example:
        >>> a, b = squeeze_or_expand(torch.zeros(4), torch.zeros(4, 1))
        >>> tuple(a.shape), tuple(b.shape)
        ((4,), (4,))
    """
    rt, rp = y_true.dim(), y_pred.dim()
    if rp == rt + 1 and y_pred.shape[-1] == 1:
        y_pred = y_pred.squeeze(-1)
    elif rt == rp + 1 and y_true.shape[-1] == 1:
        y_true = y_true.squeeze(-1)
    return y_true, y_pred


def as_tensor(value: Any, like: torch.Tensor | None = None) -> torch.Tensor:
    if value is None or isinstance(value, str):
        raise InvalidTypeError(explain("loss argument", value, "must be a tensor, an array or "
                                       "a number", "pass the labels and the predictions"))
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if like is not None and t.device != like.device:
        t = t.to(like.device)
    return t


def last_axis_mean(values: torch.Tensor) -> torch.Tensor:
    """Per-example value: average over the last axis of rank >= 2 tensors."""
    return values.mean(dim=-1) if values.dim() >= 2 else values


def _float_pair(y_true: Any, y_pred: Any) -> tuple[torch.Tensor, torch.Tensor]:
    pred = as_tensor(y_pred)
    if not pred.is_floating_point():
        pred = pred.float()
    true = as_tensor(y_true, pred).to(pred.dtype)
    true, pred = squeeze_or_expand(true, pred)
    check_shapes("y_true, y_pred shapes", true, pred)
    return true, pred


class ShapeMismatchError(UsageError):
    """Labels (or sample weights) whose shape does not broadcast to the predictions'."""


def check_shapes(what: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """TensorFlow's "Dimensions must be equal" for shapes that do not broadcast."""
    try:
        torch.broadcast_shapes(a.shape, b.shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        raise ShapeMismatchError(explain(what, (tuple(a.shape), tuple(b.shape)),
                                 "Dimensions must be equal (or broadcast)",
                                 "give labels (and sample weights) one per prediction"
                                 )) from None


# ----------------------------------------------------------------- functions
def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                                    axis: int = -1, ignore_class: int | None = None
                                    ) -> torch.Tensor:
    """Cross-entropy of integer labels against class scores; one value per example.

    ``y_pred`` holds probabilities (``from_logits=False``) or logits along ``axis``.
    Labels equal to ``ignore_class`` get loss 0.

    Example:
        >>> v = sparse_categorical_crossentropy(torch.tensor([1]), torch.tensor([[0.2, 0.8]]))
        >>> round(float(v[0]), 4)
        0.2231
    """
    pred = as_tensor(y_pred)
    if not pred.is_floating_point():
        pred = pred.float()
    labels = as_tensor(y_true, pred)
    if labels.dim() == pred.dim() and labels.shape[-1] == 1:
        labels = labels.squeeze(-1)
    if labels.dim() == pred.dim() and pred.dim() > 1:
        raise one_hot_labels_error(labels, pred)
    labels = labels.long()
    if not from_logits:
        pred = torch.log(pred.clamp(EPSILON, 1.0 - EPSILON))
    scores = pred.movedim(axis, 1) if pred.dim() > 1 else pred
    if pred.dim() == 1:
        scores, labels = scores.unsqueeze(0), labels.reshape(1)
    ignore = -100 if ignore_class is None else ignore_class
    return class_cross_entropy(scores, labels, reduction="none", ignore_index=ignore)


def categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                             label_smoothing: float = 0.0, axis: int = -1) -> torch.Tensor:
    """Cross-entropy of one-hot (or soft) labels against class scores; one value per example.

    Example:
        >>> v = categorical_crossentropy(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.2, 0.8]]))
        >>> round(float(v[0]), 4)
        0.2231
    """
    pred = as_tensor(y_pred)
    if not pred.is_floating_point():
        pred = pred.float()
    target = as_tensor(y_true, pred).to(pred.dtype)
    check_shapes("y_true, y_pred shapes", target, pred)
    if label_smoothing:
        classes = pred.shape[axis]
        target = target * (1.0 - label_smoothing) + label_smoothing / classes
    if from_logits:
        return -(target * F.log_softmax(pred, dim=axis)).sum(dim=axis)
    probs = pred / pred.sum(dim=axis, keepdim=True)
    probs = probs.clamp(EPSILON, 1.0 - EPSILON)
    return -(target * torch.log(probs)).sum(dim=axis)


def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                        label_smoothing: float = 0.0, axis: int = -1) -> torch.Tensor:
    """Binary cross-entropy, averaged over the last axis of rank >= 2 inputs.

    Example:
        >>> v = binary_crossentropy(torch.tensor([[1.0]]), torch.tensor([[0.8]]))
        >>> round(float(v[0]), 4)
        0.2231
    """
    target, pred = _float_pair(y_true, y_pred)
    if label_smoothing:
        target = target * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        values = F.binary_cross_entropy_with_logits(pred, target, reduction="none")
    else:
        p = pred.clamp(EPSILON, 1.0 - EPSILON)
        values = -(target * torch.log(p + EPSILON) + (1.0 - target) * torch.log(1.0 - p + EPSILON))
    if values.dim() >= 2:
        return values.mean(dim=axis)
    return values


def mean_squared_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """Squared error, averaged over the last axis of rank >= 2 inputs.

    Example:
        >>> mean_squared_error(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 0.0]]))
        tensor([2.5000])
    """
    target, pred = _float_pair(y_true, y_pred)
    return last_axis_mean((pred - target) ** 2)


def mean_absolute_error(y_true: Any, y_pred: Any) -> torch.Tensor:
    """Absolute error, averaged over the last axis of rank >= 2 inputs.

    Example:
        >>> mean_absolute_error(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 0.0]]))
        tensor([1.5000])
    """
    target, pred = _float_pair(y_true, y_pred)
    return last_axis_mean((pred - target).abs())


def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> torch.Tensor:
    """Huber loss: quadratic within ``delta``, linear beyond; averaged over the last axis.

    Example:
        >>> huber(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.5, 3.0]]))
        tensor([1.3125])
    """
    target, pred = _float_pair(y_true, y_pred)
    err = (pred - target).abs()
    values = torch.where(err <= delta, 0.5 * err ** 2, delta * err - 0.5 * delta ** 2)
    return last_axis_mean(values)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
