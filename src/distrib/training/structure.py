"""The structure of a batch and of a model's outputs, as Keras reads them.

A batch is ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``; its size is the
first dimension of its first tensor.  A model's outputs are one unnamed output or a
tuple, list, namedtuple or dict of named ones, and a compile argument (``loss``,
``loss_weights``, ``metrics``) is one value for every output, a list or a dict.

Example:
    >>> unpack_x_y_sample_weight((1, 2))
    (1, 2, None)
    >>> flatten_outputs({"a": 1, "b": 2})
    (['a', 'b'], [1, 2])
"""

from __future__ import annotations

from typing import Any

import torch

from distrib import nest
from distrib.errors import UsageError, explain

__all__ = ["unpack_x_y_sample_weight", "rows_of", "flatten_outputs", "per_output"]


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """Split a batch into ``(x, y, sample_weight)`` as Keras does.

    A tuple (or list) of 1, 2 or 3 items is ``(x,)``, ``(x, y)`` or ``(x, y, w)``;
    anything else is ``x`` alone.

    Example:
        >>> unpack_x_y_sample_weight((1, 2))
        (1, 2, None)
    """
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple) or hasattr(data, "_fields"):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data[0], data[1], data[2]
    raise UsageError(explain("batch", f"tuple of {len(data)} items", "Data is expected to be "
                             "in format `x`, `(x,)`, `(x, y)`, or `(x, y, sample_weight)`",
                             "yield (features, labels) or (features, labels, weights)"))


def rows_of(value: Any) -> int:
    """The batch size of a nest: dim 0 of its first tensor (0 if there is none).

    Example:
        >>> rows_of({"a": torch.zeros(3, 2)})
        3
    """
    if isinstance(value, torch.Tensor):  # the common case, without a nest walk
        return int(value.shape[0]) if value.dim() else 1
    for leaf in nest.flatten(value):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() else 1
        shape = getattr(leaf, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 1
    return 0


def flatten_outputs(value: Any) -> tuple[list[str], list[Any]]:
    """Names and values of a model's outputs: one unnamed output, or a tuple/list/dict.

    Example:
        >>> flatten_outputs((1, 2))
        (['output_1', 'output_2'], [1, 2])
    """
    if isinstance(value, dict):
        return [str(k) for k in value], list(value.values())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: named outputs
        return list(value._fields), list(value)
    if isinstance(value, (list, tuple)):
        return [f"output_{i + 1}" for i in range(len(value))], list(value)
    return ["output"], [value]


def per_output(spec: Any, names: list[str], what: str) -> list[Any]:
    """Spread a compile argument (one value, a list or a dict) over the outputs."""
    if isinstance(spec, dict):
        unknown = set(spec) - set(names)
        if unknown:
            raise UsageError(explain(what, spec, f"keys {sorted(unknown)} are not output names "
                                     f"(the model's outputs are {names})",
                                     "use the output names as keys"))
        return [spec.get(n) for n in names]
    if isinstance(spec, (list, tuple)):
        if len(spec) != len(names):
            one = "1 output" if len(names) == 1 else f"{len(names)} outputs {names}"
            raise UsageError(explain(what, spec, f"has {len(spec)} entries but the model "
                                     f"has {one}", "give one entry per output"
                                     + (f", e.g. {what}={spec[0]!r}" if len(names) == 1
                                        and spec else "")))
        return list(spec)
    return [spec] * len(names)
