"""Element structures of :mod:`distrib.data`: nests of tensors, and the leaf operations.

An element is a *nest*: a tensor (a "leaf"), or a tuple, namedtuple or dict of
nests, exactly as in ``tf.data``.  A Python ``list`` is a value, not a structure
(``from_tensor_slices([1, 2, 3])`` slices a tensor), again as in ``tf.data``.

Leaves are ``torch.Tensor`` for numbers.  Strings have no torch type: a string
element is a Python ``str`` (or ``bytes``) and a batch of strings is a numpy
array of strings (of ``bytes``: an object array, so that trailing NUL bytes
survive), which supports the same index gathers as a tensor.

Inside a random-access pipeline, rows whose tensors differ in shape (a ``map``
returning variable-length tensors) are held as a *ragged column*: an object
array of tensors, one per row.  :func:`densify` turns it into a tensor when a
batch is formed (raising ``batch``'s error when the shapes differ), and
``padded_batch`` pads it instead.

Example:
    >>> e = to_element({"x": [1.0, 2.0], "name": "a"})
    >>> e["x"], e["name"]
    (tensor([1., 2.]), 'a')
    >>> stack([(torch.tensor(1), "a"), (torch.tensor(2), "b")])
    (tensor([1, 2]), array(['a', 'b'], dtype='<U1'))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.errors import DataError, explain

__all__ = ["call_fn", "is_structure", "flatten", "flatten_up_to", "map_structure", "to_element",
           "stack", "cat", "take", "slice_rows", "unstack", "num_rows", "empty_like",
           "assert_same_structure", "densify", "is_ragged", "object_array"]

_STRING_KINDS = ("U", "S", "O")
_PLAIN_LEAVES = (torch.Tensor, bytes, str, np.ndarray)


def is_structure(x: Any) -> bool:
    """Whether ``x`` is a structure (tuple, namedtuple or dict) rather than a leaf.

    Example:
        >>> is_structure((1,)), is_structure([1])
        (True, False)
    """
    return nest.is_nested(x, lists_are_leaves=True)


def flatten(x: Any) -> list[Any]:
    """The leaves of a nest, in a fixed order (dict keys sorted, as in ``tf.nest``).

    Example:
        >>> flatten({'b': 1, 'a': (2, 3)})
        [2, 3, 1]
    """
    return nest.flatten(x, lists_are_leaves=True)


def flatten_up_to(template: Any, value: Any, what: str) -> list[Any]:
    """The parts of ``value`` at the leaves of ``template``'s structure (``tf.nest`` "up to").

    Whatever ``value`` holds at a leaf position (a shape tuple, say) is one
    part.  Raises :class:`DataError` when ``value`` lacks the structure.

    Example:
        >>> flatten_up_to((1, {'a': 2}), ((3, 4), {'a': [5]}), "padded_shapes")
        [(3, 4), [5]]
    """
    _, spec = nest.tree_flatten(template, lists_are_leaves=True)
    try:
        parts: list[Any] = spec.flatten_up_to(value)
    except (ValueError, TypeError):
        raise DataError(explain(what, _describe(value),
                                f"must have the structure of the dataset elements "
                                f"({_describe(template)})",
                                "give one entry per component, in the same tuple/dict layout")
                        ) from None
    return parts


def assert_same_structure(a: Any, b: Any, what: str = "element") -> None:
    """Raise :class:`DataError` unless ``a`` and ``b`` have the same nested structure.

    Example:
        >>> assert_same_structure((1, 2), (3, 4))
    """
    _, sa = nest.tree_flatten(a, lists_are_leaves=True)
    _, sb = nest.tree_flatten(b, lists_are_leaves=True)
    if sa != sb:
        raise DataError(explain(what, _describe(b),
                                f"must have the same structure as the first one ({_describe(a)})",
                                "return the same tuple/dict layout for every element"))


def _describe(x: Any) -> str:
    return nest.describe(x, lists_are_leaves=True)


def map_structure(fn: Callable[..., Any], first: Any, *rest: Any) -> Any:
    """Apply ``fn`` to corresponding leaves of nests of the same structure.

    Example:
        >>> map_structure(lambda a, b: a + b, (1, {'k': 2}), (10, {'k': 20}))
        (11, {'k': 22})
    """
    for other in rest:
        assert_same_structure(first, other)
    return nest.map_structure(fn, first, *rest, lists_are_leaves=True)


def _leaf(x: Any) -> Any:
    if x is None or isinstance(x, (torch.Tensor, str, bytes)):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind in _STRING_KINDS:
            if x.dtype.kind != "O" or all(isinstance(v, bytes) for v in x.flat):
                return x
            return np.array(x.tolist())
        return torch.from_numpy(np.ascontiguousarray(x))
    if isinstance(x, np.generic):
        if isinstance(x, (np.str_, np.bytes_)):
            return x.item()
        return torch.tensor(x)
    if isinstance(x, (bool, int, float)):
        return torch.tensor(x)
    if isinstance(x, list):
        flat = x
        while flat and isinstance(flat, list) and isinstance(flat[0], list):
            flat = flat[0]
        if flat and isinstance(flat, list) and isinstance(flat[0], (str, bytes)):
            return np.array(x, dtype=object if isinstance(flat[0], bytes) else None)
        try:
            return torch.tensor(x)
        except (TypeError, ValueError, RuntimeError):
            parts = [_leaf(v) for v in x]
            shapes = {tuple(p.shape) for p in parts if isinstance(p, torch.Tensor)}
            if len(shapes) > 1:
                raise DataError(explain(
                    "list", _short(x), f"Can't convert non-rectangular Python sequence to "
                    f"Tensor: its items have the shapes {sorted(shapes)}",
                    "pad the lists to one length, or use Dataset.from_generator "
                    "for elements of different sizes")) from None
            if parts and isinstance(parts[0], torch.Tensor):
                return torch.stack(parts)
            return np.array(parts)
    raise DataError(explain("dataset element component", type(x).__name__,
                            "must be a tensor, a numpy array, a Python number, a string or "
                            "a list of them (structures: tuple, namedtuple, dict)",
                            "convert it to a tensor first, for example with torch.as_tensor"))


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def to_element(x: Any, lists_are_tuples: bool = False) -> Any:
    """Convert a nest of array-likes into an element: numbers become tensors.

    With ``lists_are_tuples`` a top-level list is a structure (what ``map``
    functions and torch datasets return), as ``tf.data`` does for ``map``.

    Example:
        >>> to_element([1.0, 2.0])
        tensor([1., 2.])
    """
    if lists_are_tuples and isinstance(x, list):
        x = tuple(x)
    return map_structure(_leaf, x)


def object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding ``items`` as they are (bytes, tensors).

    Example:
        >>> object_array([b"a\\x00", b""]).tolist()
        [b'a\\x00', b'']
    """
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def is_ragged(x: Any) -> bool:
    """Whether ``x`` is a ragged column (an object array of tensors).

    Example:
        >>> is_ragged(object_array([torch.zeros(1), torch.zeros(2)])), is_ragged(torch.zeros(2))
        (True, False)
    """
    return isinstance(x, np.ndarray) and x.dtype == object and x.size > 0 \
        and isinstance(x.flat[0], (torch.Tensor, np.ndarray))


def _stack_leaves(leaves: list[Any], index: int, ragged: bool = False) -> Any:
    first = leaves[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        shape = first.shape
        for n, t in enumerate(leaves):
            if not isinstance(t, torch.Tensor) or t.shape != shape:
                if ragged and isinstance(t, torch.Tensor):
                    return object_array(leaves)
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise DataError(explain(
                    "batch", f"element {n} of shape {got}",
                    f"Cannot batch tensors with different shapes in component {index}. "
                    f"First element had shape {list(shape)} and element {n} had shape {got}",
                    "make every element the same shape (crop or pad in a map before batch), "
                    "or use padded_batch"))
        return torch.stack(leaves)
    if isinstance(first, bytes):
        return object_array(leaves)
    if isinstance(first, np.ndarray) and any(x.shape != first.shape for x in leaves):
        if ragged:
            return object_array(leaves)
        got = next(x.shape for x in leaves if x.shape != first.shape)
        raise DataError(explain(
            "batch", f"an element of shape {list(got)}",
            f"Cannot batch tensors with different shapes in component {index}. First element "
            f"had shape {list(first.shape)} and another had shape {list(got)}",
            "make every element the same shape, or use padded_batch"))
    return np.array(leaves) if isinstance(first, str) else np.stack(leaves)


def stack(elements: Sequence[Any], ragged: bool = False) -> Any:
    """Batch a non-empty list of elements: every leaf gets a new leading dimension.

    With ``ragged``, tensors of different shapes make a ragged column instead
    of an error.

    Example:
        >>> stack([torch.tensor(1), torch.tensor(2)])
        tensor([1, 2])
    """
    first = elements[0]
    if all(isinstance(e, _PLAIN_LEAVES) for e in elements):
        return _stack_leaves(list(elements), 0, ragged)          # one component: no walk
    for e in elements[1:]:
        assert_same_structure(first, e)
    columns = list(zip(*[flatten(e) for e in elements]))
    leaves = [_stack_leaves(list(col), i, ragged) for i, col in enumerate(columns)]
    return _pack(first, leaves)


def densify(batch: Any) -> Any:
    """``batch`` with every ragged column stacked into a tensor (``batch``'s error if it can't).

    Example:
        >>> densify((object_array([torch.zeros(2), torch.ones(2)]),))
        (tensor([[0., 0.],
                [1., 1.]]),)
    """
    leaves = flatten(batch)
    if not any(is_ragged(x) for x in leaves):
        return batch
    return _pack(batch, [_stack_leaves(list(x), i) if is_ragged(x) else x
                         for i, x in enumerate(leaves)])


def _pack(template: Any, leaves: list[Any]) -> Any:
    return nest.pack_sequence_as(template, leaves, lists_are_leaves=True)


def cat(batches: Sequence[Any]) -> Any:
    """Concatenate batches along their leading dimension.

    Example:
        >>> cat([torch.tensor([1]), torch.tensor([2, 3])])
        tensor([1, 2, 3])
    """
    if len(batches) == 1:
        return batches[0]

    def leaf_cat(*xs: Any) -> Any:
        if xs[0] is None:
            return None
        if any(is_ragged(x) for x in xs):
            return object_array([row for x in xs for row in
                                 (x.unbind(0) if isinstance(x, torch.Tensor) else x)])
        if isinstance(xs[0], torch.Tensor):
            return torch.cat(xs)
        return np.concatenate(xs)
    return map_structure(leaf_cat, *batches)


def take(batch: Any, index: torch.Tensor) -> Any:
    """Rows ``index`` (a 1-D int64 tensor) of every leaf: one vectorised gather per leaf.

    Example:
        >>> take((torch.tensor([5, 6, 7]),), torch.tensor([2, 0]))
        (tensor([7, 5]),)
    """
    def leaf_take(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(x, torch.Tensor):
            return x[index.to(x.device)] if x.dim() else x.expand(len(index))
        return x[index.numpy()]
    return map_structure(leaf_take, batch)


def slice_rows(batch: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of every leaf (a view, no copy).

    Example:
        >>> slice_rows(torch.arange(5), 1, 3)
        tensor([1, 2])
    """
    def leaf_slice(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(x, torch.Tensor) and x.dim() == 0:
            raise DataError(explain(
                "dataset element", "a scalar component",
                "Invalid `input_dataset`. Expected a dataset whose elements have rank >= 1 "
                "but found a dataset whose elements are scalars",
                "add the `batch` transformation to the dataset"))
        return x[lo:hi]
    return map_structure(leaf_slice, batch)


def num_rows(batch: Any) -> int:
    """The leading dimension of a batch (of its first leaf that has one).

    Example:
        >>> num_rows((torch.zeros(4, 2), 'a'))
        4
    """
    for x in flatten(batch):
        if isinstance(x, torch.Tensor):
            if x.dim():
                return int(x.shape[0])
        elif isinstance(x, np.ndarray) and x.ndim:
            return int(x.shape[0])
    raise DataError(explain("dataset element", _describe(batch),
                            "has no batch dimension (every component is a scalar)",
                            "call `batch` on the dataset before splitting it"))


def unstack(batch: Any) -> list[Any]:
    """Split a batch into its elements (the inverse of :func:`stack`).

    Example:
        >>> unstack(torch.tensor([1, 2]))
        [tensor(1), tensor(2)]
    """
    leaves = flatten(batch)
    n = num_rows(batch)
    cols: list[list[Any]] = []
    for x in leaves:
        if x is None:
            cols.append([None] * n)
        elif isinstance(x, torch.Tensor):
            cols.append(list(x.unbind(0)))
        elif x.ndim == 1:
            cols.append(x.tolist())
        else:
            cols.append(list(x))
    return [_pack(batch, [c[i] for c in cols]) for i in range(n)]


def empty_like(batch: Any) -> Any:
    """A batch of the same structure with zero rows.

    Example:
        >>> empty_like(torch.zeros(3, 2)).shape
        torch.Size([0, 2])
    """
    return map_structure(lambda x: None if x is None else x[:0], batch)


def call_fn(fn: Callable[..., Any], element: Any) -> Any:
    """Call a user function on an element the way ``tf.data`` does: tuples are unpacked.

    Example:
        >>> call_fn(lambda a, b: a + b, (1, 2))
        3
    """
    if type(element) is tuple:
        return fn(*element)
    return fn(element)
