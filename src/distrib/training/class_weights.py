"""``fit(class_weight=...)``: per-class weights turned into sample weights, as Keras does.

Keras' rule (tf-keras ``data_adapter._make_class_weight_map_fn``):

* the keys must be the class ids ``0 .. n-1`` (an empty dict is no weighting);
* a label's class is the label itself for labels of rank 1, ``round(y[..., 0])`` for
  labels ``[..., 1]`` and ``argmax(y, -1)`` for one-hot labels;
* the class weight multiplies the sample weight (``sample_weight * class_weight``);
* only the training data is weighted (not ``validation_data``), only single-output
  models take it, and only ``fit`` has the argument.

The weights reach the loss and the ``weighted_metrics`` of ``compile``; ``metrics``
take no weights.  A label outside the classes of ``class_weight`` raises an error
that names it (Keras fails inside a gather with a raw message).

Example:
    >>> table = class_weight_table({0: 1.0, 1: 5.0})
    >>> apply_class_weight((torch.zeros(3, 2), torch.tensor([0, 1, 1])), table)[2]
    tensor([1., 5., 5.])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.compile_utils import unpack_x_y_sample_weight

__all__ = ["class_weight_table", "class_weights_of", "apply_class_weight"]


def class_weight_table(class_weight: Any) -> torch.Tensor | None:
    """The weight of every class id as a float32 tensor (None for no weighting).

    Example:
        >>> class_weight_table({1: 2.0, 0: 0.5})
        tensor([0.5000, 2.0000])
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, Mapping):
        raise InvalidTypeError(explain("class_weight", class_weight, "must be a dict mapping "
                                       "each class id to its weight",
                                       "pass e.g. class_weight={0: 1.0, 1: 5.0}"))
    if not class_weight:
        return None
    keys = list(class_weight)
    try:
        ordered = sorted(keys)
    except TypeError:
        ordered = None
    if ordered is None or ordered != list(range(len(keys))):
        raise UsageError(explain("class_weight", dict(class_weight), "Expected `class_weight` "
                                 "to be a dict with keys from 0 to one less than the number "
                                 f"of classes, found {dict(class_weight)}",
                                 "give one weight for each class id 0, 1, ..., n-1"))
    values = [class_weight[k] for k in ordered]
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise InvalidTypeError(explain("class_weight", dict(class_weight), f"weights must be "
                                       f"numbers, found {bad[0]!r}",
                                       "give each class a number, e.g. {0: 1.0, 1: 5.0}"))
    return torch.tensor([float(v) for v in values], dtype=torch.float32)


def class_weights_of(y: Any, table: torch.Tensor) -> torch.Tensor:
    """Each example's class weight, from its label ``y`` (see the module docstring).

    Example:
        >>> class_weights_of(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([1.0, 3.0]))
        tensor([3., 1.])
    """
    if y is None:
        raise UsageError(explain("class_weight", "given without targets", "class weights "
                                 "are looked up from the labels", "pass y (or batches of "
                                 "(x, y)), or leave class_weight out"))
    if isinstance(y, (dict, list, tuple)) or len(nest.flatten(y)) != 1:
        raise UsageError(explain("class_weight", "with several outputs", "`class_weight` is "
                                 "only supported for Models with a single output",
                                 "weight the examples with sample_weight instead"))
    labels = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y)
    if labels.dim() >= 2 and labels.shape[-1] > 1:
        classes = labels.argmax(-1)
    else:
        classes = labels.squeeze(-1) if labels.dim() >= 2 else labels
        classes = classes.round() if classes.is_floating_point() else classes
    classes = classes.long()
    outside = (classes < 0) | (classes >= table.numel())
    if bool(outside.any()):
        label = classes[outside][0].item()
        raise UsageError(explain("class_weight", f"no weight for class {label}",
                                 f"the labels hold class {label}, but class_weight has "
                                 f"weights for classes 0 to {table.numel() - 1}",
                                 f"add a weight for class {label} (or fix the labels)"))
    return table.to(classes.device)[classes]


def apply_class_weight(batch: Any, table: torch.Tensor) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight * class_weight)`` for a batch ``(x, y)`` or ``(x, y, sw)``.

    Example:
        >>> apply_class_weight((torch.zeros(2, 1), torch.tensor([1, 0]), torch.tensor([2.0, 2.0])),
        ...                    torch.tensor([1.0, 4.0]))[2]
        tensor([8., 2.])
    """
    x, y, sw = unpack_x_y_sample_weight(batch)
    cw = class_weights_of(y, table)
    if sw is None:
        return x, y, cw
    weights = torch.as_tensor(np.asarray(sw) if not isinstance(sw, torch.Tensor) else sw)
    cw = cw.to(device=weights.device, dtype=weights.dtype if weights.is_floating_point()
               else cw.dtype)
    weights = weights.reshape(*weights.shape, *([1] * (cw.dim() - weights.dim())))
    return x, y, weights * cw
