"""Losses on class ids whose errors name the label: out of range, or one-hot given.

TensorFlow's sparse cross-entropy rejects a label outside ``[0, classes)`` with
"Received a label value of 5 which is outside the valid range of [0, 2)"; torch
raises ``IndexError: Target 5 is out of bounds`` on CPU.  :func:`class_cross_entropy`
raises TensorFlow's words with the fix instead.

Example:
    >>> float(class_cross_entropy(torch.zeros(1, 2), torch.tensor([1])))
    0.6931471824645996
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from distrib.errors import UsageError, explain

__all__ = ["class_cross_entropy", "one_hot_labels_error"]


def class_cross_entropy(scores: torch.Tensor, labels: torch.Tensor, **kwargs: Any
                        ) -> torch.Tensor:
    """``F.cross_entropy`` on class ids; a label outside ``[0, classes)`` raises TF's error.

    (On CPU torch raises for such labels and the error is rewritten; on CUDA torch's
    own device assertion fires.)

    Example:
        >>> try:
        ...     class_cross_entropy(torch.zeros(1, 2), torch.tensor([5]))
        ... except UsageError as e:
        ...     print(str(e).split(". Fix")[0])
        y_true = 'label 5': Received a label value of 5 which is outside the valid range of [0, 2)
    """
    try:
        return F.cross_entropy(scores, labels, **kwargs)
    except IndexError as e:
        classes = int(scores.shape[1]) if scores.dim() > 1 else int(scores.shape[0])
        ignore = kwargs.get("ignore_index", -100)
        bad = labels[((labels < 0) | (labels >= classes)) & (labels != ignore)]
        if not bad.numel():
            raise
        label = int(bad.reshape(-1)[0])
        fix = (f"class ids start at 0: use labels from 0 to {classes - 1}" if label < 0 else
               f"the predictions have {classes} classes (units of the output layer): give "
               f"the output layer one unit per class ({label + 1} or more for this label), "
               f"or use labels from 0 to {classes - 1}")
        raise UsageError(explain(
            "y_true", f"label {label}", f"Received a label value of {label} which is outside "
            f"the valid range of [0, {classes})", fix)) from e


def one_hot_labels_error(labels: torch.Tensor, pred: torch.Tensor) -> UsageError:
    """The error for one-hot (or soft) labels given to a loss on class ids."""
    return UsageError(explain(
        "y_true", f"labels of shape {tuple(labels.shape)} for predictions of shape "
        f"{tuple(pred.shape)}", "a sparse categorical cross-entropy takes one integer class "
        "id per example (labels of shape (batch,) or (batch, 1)); these look one-hot",
        "use loss='categorical_crossentropy' for one-hot labels, or pass the class ids "
        "y.argmax(-1)"))
