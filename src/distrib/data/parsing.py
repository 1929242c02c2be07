"""``tf.io.parse_single_example`` / ``parse_example`` and their feature specs, over torch.

Numbers come back as torch tensors (``torch.int64``, ``torch.float32``);
strings as ``bytes`` (a scalar) or numpy object arrays of ``bytes``, as
``tf.data`` gives them.  Differences from TensorFlow:

* ``VarLenFeature`` gives a dense 1-D tensor of the example's values (TF: a
  ``tf.SparseTensor``).  In :func:`parse_example` the batch is padded to its
  longest list with 0 (or ``b""``) — what ``tf.sparse.to_dense`` of TF's
  result gives; to keep each example's length, parse with
  :func:`parse_single_example` and batch with ``padded_batch``.
* dtypes are ``torch.int64``, ``torch.float32`` and ``"string"`` (the names
  ``"int64"``, ``"float32"`` are accepted too).

Example:
    >>> from distrib.data.example_proto import make_example
    >>> blob = make_example({"label": 7, "x": [1.0, 2.0]})
    >>> out = parse_single_example(blob, {"label": FixedLenFeature([], torch.int64),
    ...                                   "x": VarLenFeature(torch.float32)})
    >>> int(out["label"]), out["x"].tolist()
    (7, [1.0, 2.0])
"""

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from distrib.data.example_proto import example_features, feature_values
from distrib.errors import DataError, InvalidTypeError, UsageError, explain

__all__ = ["FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature",
           "parse_single_example", "parse_example"]

_KIND_OF = {torch.int64: "int64", torch.float32: "float", "string": "bytes"}
_TF_NAME = {"int64": "int64", "float": "float", "bytes": "string"}
_ALIASES: dict[Any, Any] = {"int64": torch.int64, "float32": torch.float32, "float": torch.float32,
                            "string": "string", "bytes": "string", bytes: "string",
                            str: "string", torch.int64: torch.int64,
                            torch.float32: torch.float32}


class FixedLenFeature(NamedTuple):
    """A feature with a fixed number of values, returned with ``shape`` (``tf.io.FixedLenFeature``).

    Without ``default_value`` an Example that lacks the feature is an error.

    Example:
        >>> FixedLenFeature([2], torch.float32).shape
        [2]
    """

    shape: Any
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature with any number of values: a dense 1-D tensor per example (TF: a SparseTensor).

    Example:
        >>> VarLenFeature(torch.int64).dtype
        torch.int64
    """

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """A list of ``shape``-sized items: ``[num_items, *shape]`` (``tf.io.FixedLenSequenceFeature``).

    ``allow_missing`` must be True (as in TF).  In :func:`parse_example` the
    batch is padded to its longest list with ``default_value`` (0 or ``b""``).

    Example:
        >>> FixedLenSequenceFeature([], torch.int64, allow_missing=True).allow_missing
        True
    """

    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


def _dtype(key: str, dtype: Any) -> Any:
    try:
        return _ALIASES[dtype]
    except (KeyError, TypeError):
        raise InvalidTypeError(explain(
            f"feature {key!r} dtype", dtype,
            "must be torch.int64, torch.float32 or 'string' (the types an Example holds: "
            "float, int64, string)",
            "parse as torch.int64 or torch.float32 and cast afterwards, e.g. .to(torch.int32)")
        ) from None


def _shape(key: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = [shape]
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise UsageError(explain(f"feature {key!r} shape", shape,
                                 "must be a list of non-negative ints", "use [] for a scalar")
                         ) from None
    if any(d < 0 for d in dims):
        raise UsageError(explain(f"feature {key!r} shape", shape,
                                 "must be a list of non-negative ints (every dimension known)",
                                 "use VarLenFeature or FixedLenSequenceFeature for lists of "
                                 "any length"))
    return dims


def _as_strings(values: Any) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _finish(values: Any, dtype: Any, shape: tuple[int, ...]) -> Any:
    """``values`` (numpy array or list of bytes) as the torch form of ``dtype`` and ``shape``."""
    if dtype == "string":
        if not shape and len(values) == 1:
            return bytes(values[0])
        arr = _as_strings(values) if isinstance(values, list) else values
        arr = arr.reshape(shape)
        return arr.item() if not shape else arr
    if not values.flags.writeable:           # a view of the record's bytes: copy it
        values = values.copy()
    out = torch.from_numpy(values)
    if out.dtype != dtype:
        out = out.to(dtype)
    return out if tuple(out.shape) == shape else out.reshape(shape)


def _default(key: str, spec: Any, dtype: Any, shape: tuple[int, ...]) -> Any:
    value = spec.default_value
    flat: Any
    if dtype == "string":
        flat = [value] if isinstance(value, (bytes, str)) else list(np.asarray(value).ravel())
        flat = [v.encode() if isinstance(v, str) else bytes(v) for v in flat]
    else:
        flat = np.asarray(value.numpy() if isinstance(value, torch.Tensor) else value).ravel()
    if len(flat) != math.prod(shape):
        raise UsageError(explain(
            f"feature {key!r} default_value", value,
            f"must have {math.prod(shape)} values, the number of elements of shape "
            f"{list(shape)}", "give one value per element (a scalar only for shape [])"))
    if dtype == "string":
        return _finish(list(flat), dtype, shape)
    return _finish(np.asarray(flat).astype(np.int64 if dtype == torch.int64 else np.float32),
                   dtype, shape)


class _Spec:
    """One parsed feature: its kind of spec, dtype, shape and default."""

    def __init__(self, key: str, spec: Any) -> None:
        self.key = key
        if not isinstance(spec, (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature)):
            raise InvalidTypeError(explain(
                f"features[{key!r}]", spec, "must be a FixedLenFeature, VarLenFeature or "
                "FixedLenSequenceFeature", "describe each feature, e.g. "
                "FixedLenFeature([], torch.int64)"))
        self.spec = spec
        self.dtype = _dtype(key, spec.dtype)
        self.kind = _KIND_OF[self.dtype]
        self.shape = () if isinstance(spec, VarLenFeature) else _shape(key, spec.shape)
        self.default = None
        if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
            raise UsageError(explain(
                f"features[{key!r}].allow_missing", False,
                "Unsupported: FixedLenSequenceFeature requires allow_missing to be True",
                "pass allow_missing=True"))
        if isinstance(spec, FixedLenFeature) and spec.default_value is not None:
            self.default = _default(key, spec, self.dtype, self.shape)

    def values(self, feature: Any) -> Any:
        """The example's raw values of this feature (checked), or None when missing."""
        if feature is None:
            return None
        kind, values = feature_values(feature)
        if kind is None:
            return [] if self.kind == "bytes" else np.zeros(0, dtype=np.float32
                                                             if self.kind == "float" else np.int64)
        if kind != self.kind:
            raise DataError(explain(
                "serialized Example", f"feature {self.key!r} holds {_TF_NAME[kind]}",
                f"Key: {self.key}.  Data types don't match. Data type: {_TF_NAME[kind]} but "
                f"expected type: {_TF_NAME[self.kind]}",
                f"declare the feature with the dtype it holds ({_TF_NAME[kind]})"))
        return values

    def dense(self, values: Any) -> Any:
        """The parsed value of one example for a FixedLen / FixedLenSequence / VarLen spec."""
        spec = self.spec
        if isinstance(spec, VarLenFeature):
            return _empty(self.dtype, (0,)) if values is None else \
                _finish(values, self.dtype, (-1,))
        if isinstance(spec, FixedLenSequenceFeature):
            item = math.prod(self.shape)
            n = 0 if values is None else len(values)
            if values is None or n == 0:
                return _empty(self.dtype, (0, *self.shape))
            if item == 0 or n % item:
                raise DataError(self._count_error(n, f"a multiple of {item}"))
            return _finish(values, self.dtype, (n // item, *self.shape))
        if values is None:
            if self.default is None:
                raise DataError(explain(
                    "serialized Example", f"no feature {self.key!r}",
                    f"Feature: {self.key} (data type: {_TF_NAME[self.kind]}) is required but "
                    "could not be found", "give the FixedLenFeature a default_value, or use "
                    "VarLenFeature for features some examples lack"))
            return self.default
        if len(values) != math.prod(self.shape):
            raise DataError(self._count_error(len(values), str(math.prod(self.shape))))
        return _finish(values, self.dtype, self.shape)

    def _count_error(self, got: int, expected: str) -> str:
        name = _TF_NAME[self.kind]
        return explain(
            "serialized Example", f"feature {self.key!r} with {got} values",
            f"Key: {self.key}.  Can't parse serialized Example: Number of {name} values != "
            f"expected.  Values size: {got} but output shape: {list(self.shape)} (expected "
            f"{expected} values)", "declare the shape the examples have, or use "
            "VarLenFeature / FixedLenSequenceFeature for lists of varying length")


def _empty(dtype: Any, shape: tuple[int, ...]) -> Any:
    if dtype == "string":
        return np.empty(shape, dtype=object)
    return torch.zeros(shape, dtype=dtype)


_SPEC_CACHE: dict[Any, tuple[list[Any], list[_Spec]]] = {}
"""Checked specs by the identity of the feature specs (kept alive here, so ids stay theirs)."""


def _specs(features: Any) -> list[_Spec]:
    if not isinstance(features, Mapping):
        raise InvalidTypeError(explain("features", type(features).__name__,
                                       "must be a dict of feature name to feature spec",
                                       "pass {'label': FixedLenFeature([], torch.int64)}"))
    key = tuple((k, id(v)) for k, v in features.items())
    cached = _SPEC_CACHE.get(key)
    if cached is None or any(a is not b for a, b in zip(cached[0], features.values())):
        cached = (list(features.values()), [_Spec(str(k), v) for k, v in features.items()])
        if len(_SPEC_CACHE) >= 64:
            _SPEC_CACHE.pop(next(iter(_SPEC_CACHE)))
        _SPEC_CACHE[key] = cached
    return cached[1]


def _blob(serialized: Any) -> bytes:
    if isinstance(serialized, np.ndarray) and serialized.ndim == 0:
        serialized = serialized.item()
    if isinstance(serialized, str):
        serialized = serialized.encode("latin-1")
    if not isinstance(serialized, (bytes, bytearray, memoryview, np.bytes_)):
        raise InvalidTypeError(explain(
            "serialized", type(serialized).__name__, "must be the bytes of one Example",
            "pass a record of a TFRecordDataset; for a batch of records use parse_example"))
    return bytes(serialized)


def parse_single_example(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse one serialized ``tf.train.Example`` into ``{name: value}`` (``tf.io.parse_single_example``).

    Example:
        >>> from distrib.data.example_proto import make_example
        >>> out = parse_single_example(make_example({"x": [1, 2, 3]}),
        ...                            {"x": FixedLenFeature([3], torch.int64),
        ...                             "y": FixedLenFeature([], torch.float32, default_value=0.5)})
        >>> out["x"].tolist(), float(out["y"])
        ([1, 2, 3], 0.5)
    """
    specs = _specs(features)
    found = example_features(_blob(serialized))
    return {s.key: s.dense(s.values(found.get(s.key))) for s in specs}


def parse_example(serialized: Iterable[Any], features: Mapping[str, Any]) -> dict[str, Any]:
    """Parse a batch of serialized Examples (``tf.io.parse_example``): values gain a batch dimension.

    ``VarLenFeature`` and ``FixedLenSequenceFeature`` values are padded to the
    longest in the batch (with 0, ``b""``, or the sequence feature's
    ``default_value``).

    Example:
        >>> from distrib.data.example_proto import make_example
        >>> blobs = [make_example({"x": [1, 2]}), make_example({"x": [3]})]
        >>> parse_example(blobs, {"x": VarLenFeature(torch.int64)})["x"].tolist()
        [[1, 2], [3, 0]]
    """
    if isinstance(serialized, (bytes, bytearray, str)):
        raise InvalidTypeError(explain("serialized", type(serialized).__name__,
                                       "must be a batch (list or array) of serialized Examples",
                                       "use parse_single_example for one Example"))
    specs = _specs(features)
    rows = [example_features(_blob(s)) for s in serialized]
    out: dict[str, Any] = {}
    for spec in specs:
        values = [spec.dense(spec.values(found.get(spec.key))) for found in rows]
        out[spec.key] = _stack(spec, values)
    return out


def _stack(spec: _Spec, values: list[Any]) -> Any:
    ragged = isinstance(spec.spec, (VarLenFeature, FixedLenSequenceFeature))
    if not values:
        return _empty(spec.dtype, (0, *((0,) if ragged else ()), *spec.shape))
    if spec.dtype == "string":
        if not ragged:
            out = np.empty((len(values), *spec.shape), dtype=object)
            for i, v in enumerate(values):
                out[i] = v
            return out
        pad = spec.spec.default_value if isinstance(spec.spec, FixedLenSequenceFeature) \
            and spec.spec.default_value is not None else b""
        longest = max(len(v) for v in values)
        out = np.full((len(values), longest, *spec.shape), pad, dtype=object)
        for i, v in enumerate(values):
            out[i, :len(v)] = v
        return out
    if not ragged:
        return torch.stack(values)
    pad = spec.spec.default_value if isinstance(spec.spec, FixedLenSequenceFeature) \
        and spec.spec.default_value is not None else 0
    longest = max(int(v.shape[0]) for v in values)
    out_t = torch.full((len(values), longest, *spec.shape), pad, dtype=spec.dtype)
    for i, v in enumerate(values):
        out_t[i, :v.shape[0]] = v
    return out_t
