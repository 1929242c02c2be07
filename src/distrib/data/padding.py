"""``padded_batch``: batches of elements padded to a common shape (``tf.data`` semantics).

Each component is padded to its ``padded_shapes`` entry: a fixed size where
one is given, the largest size in the batch where the entry is None or -1
(with no ``padded_shapes``, every dimension pads to the batch's largest).
Padding values default to 0 (False for bool) and the empty string for
strings.  Over a random-access input, batches stay lazy batch references whose
rows are padded when gathered, so they split across replicas as ``batch``'s
do: the global batch is padded as a whole, then split.

Example:
    >>> ds = Dataset.range(1, 4).map(lambda x: torch.arange(int(x)))
    >>> [b.tolist() for b in ds.padded_batch(2)]
    [[[0, 0], [0, 1]], [[0, 1, 2]]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from distrib.data import _nest
from distrib.data._plan import BatchRef, Ctx
from distrib.data.dataset import Dataset
from distrib.data.transforms import Batch
from distrib.errors import DataError, InvalidTypeError, UsageError, explain

__all__ = ["PaddedBatch", "pad_components"]


def _shape_entry(value: Any) -> list[int | None] | None:
    """A ``padded_shapes`` entry as a list of sizes (None: pad to the batch's largest)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor | np.ndarray):
        value = value.tolist()
    if isinstance(value, int) or not isinstance(value, Sequence) or isinstance(value, str):
        raise UsageError(explain(
            "padded_shapes entry", value,
            "must be a shape: a list of sizes, None or -1 for 'the largest in the batch'",
            "use [] for a scalar component, [None] for a vector padded to the batch's longest"))
    out: list[int | None] = []
    for d in value:
        if d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= -1):
            out.append(None if d in (None, -1) else int(d))
        else:
            raise UsageError(explain("padded_shapes entry", value,
                                     "sizes must be ints >= 0, None or -1",
                                     "use None (or -1) for a dimension padded to the batch's "
                                     "largest"))
    return out


def _kind(item: Any) -> str:
    if isinstance(item, torch.Tensor):
        return "tensor"
    if isinstance(item, (str, bytes)) or (isinstance(item, np.ndarray)
                                          and item.dtype.kind in "USO"):
        return "string"
    return "other"


def _shape_of(item: Any) -> tuple[int, ...]:
    return tuple(item.shape) if isinstance(item, (torch.Tensor, np.ndarray)) else ()


def _pad_value(value: Any, sample: Any) -> Any:
    """The padding value of a component like ``sample``, checked against its type."""
    if _kind(sample) == "string":
        is_bytes = isinstance(sample, bytes) or (
            isinstance(sample, np.ndarray) and sample.size > 0 and isinstance(sample.flat[0], bytes))
        if value is None:
            return b"" if is_bytes else ""
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if not isinstance(value, (str, bytes)):
            raise InvalidTypeError(_type_error(value, "string"))
        return value.encode() if is_bytes and isinstance(value, str) else value
    dtype = sample.dtype
    if value is None:
        return False if dtype == torch.bool else 0
    array = value if isinstance(value, torch.Tensor) else np.asarray(value)
    if isinstance(array, np.ndarray) and array.dtype.kind not in "biufc":
        raise InvalidTypeError(_type_error(value, str(dtype)))
    arr = array if isinstance(array, torch.Tensor) else torch.as_tensor(array)
    if arr.dim():
        raise UsageError(explain("padding_values", value,
                                 "Invalid `padding_values`. `padding_values` values should be "
                                 f"scalars, but got {tuple(arr.shape)}",
                                 "give one scalar per component"))
    lossy = (arr.is_floating_point() and not dtype.is_floating_point) or (
        arr.dtype != torch.bool and dtype == torch.bool) or arr.is_complex() != dtype.is_complex
    if lossy:
        raise InvalidTypeError(_type_error(value, str(dtype)))
    return arr.item()


def _type_error(value: Any, expected: str) -> str:
    got = type(value).__name__ if not isinstance(value, torch.Tensor) else str(value.dtype)
    return explain("padding_values", value,
                   f"Invalid `padding_values`. `padding_values` values type {got} does not "
                   f"match type {expected} of the corresponding input component",
                   "give a padding value of the component's type")


def _target(items: list[Any], entry: list[int | None] | None) -> tuple[int, ...]:
    shapes = [_shape_of(x) for x in items]
    rank = len(shapes[0]) if entry is None else len(entry)
    for s in shapes:
        if len(s) != rank:
            want = tuple("?" if d is None else d for d in entry) if entry is not None \
                else shapes[0]
            raise DataError(explain(
                "padded_batch", f"an element of shape {s}",
                f"The padded shape {want} is not compatible with the shape {s} of the "
                "corresponding input component (ranks differ)",
                "give padded_shapes the rank of the component"))
    dims = []
    for d in range(rank):
        largest = max(s[d] for s in shapes)
        fixed = None if entry is None else entry[d]
        if fixed is not None and largest > fixed:
            raise DataError(explain(
                "padded_batch", f"an element of shape {next(s for s in shapes if s[d] > fixed)}",
                "Attempted to pad to a smaller size than the input element (padded shape "
                f"{entry})", "make padded_shapes at least as large as every element, or None "
                "to pad to the largest in the batch"))
        dims.append(largest if fixed is None else fixed)
    return tuple(dims)


def _pad_column(items: list[Any], entry: list[int | None] | None, value: Any) -> Any:
    target = _target(items, entry)
    pad = _pad_value(value, items[0])
    if isinstance(items[0], torch.Tensor):
        if all(tuple(x.shape) == target for x in items):
            return torch.stack(items)
        out = torch.full((len(items), *target), pad, dtype=items[0].dtype)
        for i, x in enumerate(items):
            out[i][tuple(slice(0, n) for n in x.shape)] = x
        return out
    if not target:
        return _nest._stack_leaves(items, 0)
    arr = np.full((len(items), *target), pad, dtype=object)
    for i, x in enumerate(items):
        arr[i][tuple(slice(0, n) for n in x.shape)] = x
    return arr if isinstance(pad, bytes) else arr.astype(str)


def _pad_dense(column: torch.Tensor, entry: list[int | None] | None, value: Any) -> Any:
    """A stacked tensor column (every row of one shape): padded in one copy, if at all."""
    target = _target([column[0]], entry)
    pad = _pad_value(value, column[0])
    if target == tuple(column.shape[1:]):
        return column
    out = torch.full((column.shape[0], *target), pad, dtype=column.dtype)
    out[(slice(None), *[slice(0, n) for n in column.shape[1:]])] = column
    return out


def _rows(column: Any) -> Any:
    if isinstance(column, torch.Tensor) and column.dim() and column.shape[0]:
        return column
    return list(column)


def pad_components(template: Any, columns: list[Any], padded_shapes: Any,
                   padding_values: Any) -> Any:
    """One padded batch: ``columns[i]`` holds component ``i`` of every element.

    A column is a list of the elements' values, or a tensor stacking them.

    ``template`` is an element (or batch) giving the structure.

    Example:
        >>> pad_components(torch.zeros(1), [[torch.ones(1), torch.ones(2)]], None, -1).tolist()
        [[1.0, -1.0], [1.0, 1.0]]
    """
    n = len(columns)
    shapes = [None] * n if padded_shapes is None else [
        _shape_entry(s) for s in _nest.flatten_up_to(template, padded_shapes, "padded_shapes")]
    if padding_values is None or not _nest.is_structure(padding_values):
        values = [padding_values] * n
    else:
        values = _nest.flatten_up_to(template, padding_values, "padding_values")
    leaves = [None if col[0] is None else
              _pad_dense(col, shapes[i], values[i]) if isinstance(col, torch.Tensor) else
              _pad_column(col, shapes[i], values[i]) for i, col in enumerate(columns)]
    it = iter(leaves)
    return _nest.map_structure(lambda _: next(it), template)


class PaddedBatch(Batch):
    """``padded_batch``: like ``batch``, with every component padded to a common shape.

    Example:
        >>> ds = PaddedBatch(Dataset.range(3).map(lambda x: torch.ones(int(x))), 3, [4], None,
        ...                  False)
        >>> next(iter(ds)).shape
        torch.Size([3, 4])
    """

    def __init__(self, dataset: Dataset, batch_size: int, padded_shapes: Any,
                 padding_values: Any, drop_remainder: bool) -> None:
        if isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size < 1:
            raise UsageError(explain("batch_size", batch_size,
                                     "Batch size must be greater than zero",
                                     "use a positive batch size"))
        self._padded_shapes = padded_shapes
        self._padding_values = padding_values
        super().__init__(dataset, batch_size, drop_remainder)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (*super()._uid_parts(), repr(self._padded_shapes), repr(self._padding_values))

    def _collate(self, rows: Any) -> Any:
        columns = [_rows(c) if c is not None else [None] for c in _nest.flatten(rows)]
        return pad_components(rows, columns, self._padded_shapes, self._padding_values)

    def _pad(self, elements: list[Any]) -> Any:
        first = elements[0]
        for e in elements[1:]:
            _nest.assert_same_structure(first, e)
        columns = [list(col) for col in zip(*[_nest.flatten(e) for e in elements])]
        return pad_components(first, columns, self._padded_shapes, self._padding_values)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> list[BatchRef]:
        return [dataclasses.replace(ref, collate=self._collate) for ref in super()._get(pos, ctx)]

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        buf: list[Any] = []
        for element in self._input._elements(ctx):
            buf.append(element)
            if len(buf) == self._size:
                yield self._pad(buf)
                buf = []
        if buf and not self._drop:
            yield self._pad(buf)

    def _spec(self) -> Any:
        inner = self._input.element_spec
        if inner is None:
            return None
        lead = self._size if self._drop else None
        specs = _nest.flatten(inner)
        if self._padded_shapes is None:
            shapes: list[Any] = [None] * len(specs)
        else:
            shapes = [_shape_entry(s) for s in
                      _nest.flatten_up_to(inner, self._padded_shapes, "padded_shapes")]
        out = [None if s is None else type(s)(
            (lead, *([None] * len(s.shape) if e is None else e)), s.dtype)
            for s, e in zip(specs, shapes)]
        it = iter(out)
        return _nest.map_structure(lambda _: next(it), inner)
