"""``tf.train.Example`` without TensorFlow: read and written with protobuf, or by hand.

An Example is ``Example{features: Features{feature: map<string, Feature>}}``,
where a ``Feature`` holds one of ``bytes_list`` (field 1), ``float_list`` (2)
or ``int64_list`` (3), each a message with one repeated ``value`` field
(packed or not: both are read).  :func:`decode_example` turns serialized bytes
into ``{name: (kind, values)}``; :func:`make_example` writes the bytes that
``tf.train.Example.SerializeToString(deterministic=True)`` writes.

With protobuf installed (``pip install distrib[tfrecord]``) both go through
protobuf's C parser and serialiser (the messages of :mod:`distrib.data._example_pb`);
without it, through the wire-format code below.  Both give the same values and
bytes.  TensorFlow's parser differs from protobuf's on one non-canonical
encoding (a Feature holding two lists: TF keeps the first, protobuf merges
them), so a record whose canonical size differs from its length (it holds
repeated, unpacked or oddly encoded fields) is read by the wire-format code,
which follows TensorFlow there.

Example:
    >>> blob = make_example({"label": 3, "x": [1.5, 2.0], "name": b"ab"})
    >>> decode_example(blob)["x"]
    ('float', array([1.5, 2. ], dtype=float32))
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from distrib.data import _example_pb
from distrib.errors import DataError, InvalidTypeError, explain

__all__ = ["decode_example", "example_features", "feature_values", "make_example", "KINDS"]

KINDS = {1: "bytes", 2: "float", 3: "int64"}
_FIELD_OF = {v: k for k, v in KINDS.items()}


class _Malformed(Exception):
    """Raised inside the decoder; :func:`decode_example` turns it into a DataError."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed(f"a varint at byte {pos} is cut off")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """``(field, wire_type, value_or_start, stop)`` of every field in ``buf[pos:end]``."""
    out = []
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            out.append((field, 0, value, pos))
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            if pos + size > end:
                raise _Malformed(f"field {field} at byte {pos} runs past the end")
            out.append((field, 2, pos, pos + size))
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise _Malformed(f"field {field} at byte {pos} runs past the end")
            out.append((field, wire, pos, pos + width))
            pos += width
        else:
            raise _Malformed(f"wire type {wire} of field {field} is not supported")
    if pos != end:
        raise _Malformed("a field runs past the end of its message")
    return out


def _packed_varints(buf: bytes, start: int, stop: int) -> np.ndarray:
    raw = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
    if buf[start:stop].isascii():             # every value below 128: one byte each
        return raw.astype(np.int64)
    ends = np.flatnonzero(raw < 0x80)
    if raw.size and (ends.size == 0 or ends[-1] != raw.size - 1):
        raise _Malformed(f"a packed int64 list at byte {start} is cut off")
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    widths = ends - starts + 1
    if widths.size and int(widths.max()) > 10:
        raise _Malformed(f"a varint in the int64 list at byte {start} is too long")
    within = np.arange(raw.size) - np.repeat(starts, widths)
    parts = (raw & 0x7F).astype(np.uint64) << (7 * within).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts).view(np.int64) if raw.size \
        else np.zeros(0, dtype=np.int64)


def _list_values(buf: bytes, kind: str, start: int, stop: int) -> Any:
    """The values of a BytesList / FloatList / Int64List message in ``buf[start:stop]``."""
    if kind != "bytes" and stop - start >= 2 and buf[start] == 0x0A:
        size, pos = _varint(buf, start + 1, stop)
        if pos + size == stop:                  # the usual encoding: one packed field
            if kind == "float":
                if size % 4:
                    raise _Malformed(f"a packed float list at byte {pos} is cut off")
                return np.frombuffer(buf, dtype="<f4", count=size // 4, offset=pos)
            return _packed_varints(buf, pos, stop)
    if kind == "bytes":
        return [buf[s:e] for f, w, s, e in _fields(buf, start, stop) if f == 1 and w == 2]
    parts: list[Any] = []
    for f, w, s, e in _fields(buf, start, stop):
        if f != 1:
            continue
        if kind == "float":
            if w == 2:
                if (e - s) % 4:
                    raise _Malformed(f"a packed float list at byte {s} is cut off")
                parts.append(np.frombuffer(buf, dtype="<f4", count=(e - s) // 4, offset=s))
            elif w == 5:
                parts.append(np.array(struct.unpack_from("<f", buf, s), dtype=np.float32))
        elif w == 2:
            parts.append(_packed_varints(buf, s, e))
        elif w == 0:
            parts.append(np.array([s - (1 << 64) if s >= 1 << 63 else s], dtype=np.int64))
    dtype = np.float32 if kind == "float" else np.int64
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0].astype(dtype) if len(parts) == 1 else np.concatenate(parts).astype(dtype)


def _first_list(buf: bytes, start: int, stop: int) -> tuple[str | None, int, int]:
    """The first list of a Feature message (later ones are ignored, as TF's parser does)."""
    for f, w, s, e in _fields(buf, start, stop):
        if w == 2 and f in KINDS:
            return KINDS[f], s, e
    return None, 0, 0


def _entry(buf: bytes, pos: int, end: int) -> tuple[str, tuple[str | None, int, int]]:
    # the usual layout: key (field 1), then a Feature (field 2) holding one list
    if pos < end and buf[pos] == 0x0A:
        size, p = _varint(buf, pos + 1, end)
        if p + size < end and buf[p + size] == 0x12:
            key = buf[p:p + size].decode("utf-8")
            size, fstart = _varint(buf, p + size + 1, end)
            if fstart + size == end and size >= 2 and buf[fstart] in (0x0A, 0x12, 0x1A):
                lsize, lstart = _varint(buf, fstart + 1, end)
                if lstart + lsize == end:
                    return key, (KINDS[buf[fstart] >> 3], lstart, end)
    key = ""
    feature: tuple[str | None, int, int] = (None, 0, 0)
    for f, w, s, e in _fields(buf, pos, end):
        if f == 1 and w == 2:
            key = buf[s:e].decode("utf-8")
        elif f == 2 and w == 2:
            feature = _first_list(buf, s, e)
    return key, feature


def _index(buf: bytes) -> dict[str, tuple[str | None, int, int]]:
    """``{name: (kind, start, stop)}``: where each feature's list is (values not decoded)."""
    out: dict[str, tuple[str | None, int, int]] = {}
    for f, w, s, e in _fields(buf, 0, len(buf)):
        if f != 1 or w != 2:
            continue
        pos = s
        while pos < e:                      # Features: map entries (field 1), fast path
            tag = buf[pos]
            if tag == 0x0A:
                size, body = _varint(buf, pos + 1, e)
                if body + size > e:
                    raise _Malformed(f"a map entry at byte {body} runs past the end")
                key, feature = _entry(buf, body, body + size)
                out[key] = feature
                pos = body + size
            else:
                pos = _field_end(buf, pos, e)
                if pos > e:
                    raise _Malformed(f"a field at byte {pos} runs past the end")
    return out


def _field_end(buf: bytes, pos: int, end: int) -> int:
    """Where the field starting at ``pos`` ends."""
    key, p = _varint(buf, pos, end)
    wire = key & 7
    if wire == 0:
        return _varint(buf, p, end)[1]
    if wire == 2:
        size, p = _varint(buf, p, end)
        return p + size
    if wire in (1, 5):
        return p + (8 if wire == 1 else 4)
    raise _Malformed(f"wire type {wire} of field {key >> 3} is not supported")


def example_features(serialized: Any) -> Mapping[str, Any]:
    """``{name: feature}`` of a serialized Example, values not yet converted (see :func:`feature_values`).

    Example:
        >>> feature_values(example_features(make_example({"n": [1, -2]}))["n"])
        ('int64', array([ 1, -2]))
    """
    buf = bytes(serialized)
    if _example_pb.AVAILABLE:
        try:
            ex = _example_pb.Example.FromString(buf)
        except Exception as err:        # protobuf's DecodeError (its module varies by backend)
            raise _parse_error(buf, err) from None
        if ex.ByteSize() == len(buf):   # canonical: protobuf's reading is TensorFlow's
            features: Mapping[str, Any] = ex.features.feature
            return features
    try:
        return {k: (buf, *w) for k, w in _index(buf).items()}
    except (_Malformed, UnicodeDecodeError, IndexError) as err:
        raise _parse_error(buf, err) from None


_SMALL = 32     # lists up to this long convert faster element by element than by buffer


def _pb_values(feature: Any) -> tuple[str | None, Any]:
    which = feature.WhichOneof("kind")
    if which is None:
        return None, None
    values = getattr(feature, which).value
    if which == "bytes_list":
        return "bytes", list(values)
    dtype = np.float32 if which == "float_list" else np.int64
    out = np.fromiter(values, dtype, len(values)) if len(values) <= _SMALL \
        else np.array(values, dtype=dtype)
    return ("float" if which == "float_list" else "int64"), out


def feature_values(feature: Any) -> tuple[str | None, Any]:
    """``(kind, values)`` of one feature of :func:`example_features`.

    ``kind`` is ``"bytes"`` (values: a list of bytes), ``"float"`` (float32
    array), ``"int64"`` (int64 array), or None (values None) for a Feature
    with no list.
    """
    if not isinstance(feature, tuple):
        return _pb_values(feature)
    buf, kind, start, stop = feature
    if kind is None:
        return None, None
    try:
        return kind, _list_values(buf, kind, start, stop)
    except (_Malformed, IndexError) as err:
        raise _parse_error(buf, err) from None


def decode_example(serialized: bytes | bytearray | memoryview) -> dict[str, tuple[str | None, Any]]:
    """``{name: (kind, values)}`` of a serialized ``tf.train.Example`` (kinds: :func:`feature_values`).

    Example:
        >>> decode_example(make_example({"n": [1, -2]}))
        {'n': ('int64', array([ 1, -2]))}
    """
    return {k: feature_values(f) for k, f in example_features(serialized).items()}


def _parse_error(buf: bytes, err: Exception) -> DataError:
    return DataError(explain("serialized", _preview(buf),
                             f"Could not parse example input: {err}",
                             "pass the bytes of a serialized tf.train.Example (a record of "
                             "a TFRecord file of Examples)"))


def _preview(buf: bytes) -> str:
    return repr(buf[:40]) + ("..." if len(buf) > 40 else "")


# ----------------------------------------------------------------- writing
def _encode_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(field: int, payload: bytes) -> bytes:
    return _encode_varint(field << 3 | 2) + _encode_varint(len(payload)) + payload


def _kind_and_values(name: str, value: Any) -> tuple[str, Any]:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (bytes, str, int, float, bool, np.generic)):
        value = [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (bytes, str))
                                                         for v in value):
        return "bytes", [v.encode() if isinstance(v, str) else v for v in value]   # keeps NULs
    arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if not isinstance(value, np.ndarray) and arr.size == 0:
        arr = np.asarray([], dtype=object)      # an empty list: no type to write
    if arr.dtype.kind in "biu":
        return "int64", arr.astype(np.int64).ravel()
    if arr.dtype.kind == "f":
        return "float", arr.astype("<f4").ravel()
    if arr.dtype.kind in "USO" and arr.size and all(isinstance(v, (bytes, str, np.str_,
                                                                   np.bytes_))
                                                    for v in arr.ravel().tolist()):
        return "bytes", [v.encode() if isinstance(v, str) else bytes(v)
                         for v in arr.ravel().tolist()]
    raise InvalidTypeError(explain(
        f"make_example feature {name!r}", value,
        "must be ints, floats or strings (bytes/str), or an array or tensor of them; an empty "
        "list has no type", "give an empty feature a dtype, e.g. np.array([], dtype=np.int64) "
        "or torch.tensor([], dtype=torch.float32)"))


def _encode_feature(kind: str, values: Any) -> bytes:
    if kind == "bytes":
        inner = b"".join(_len_field(1, v) for v in values)
    elif kind == "float":
        inner = _len_field(1, values.tobytes()) if values.size else b""
    else:
        inner = _len_field(1, b"".join(_encode_varint(int(v)) for v in values.tolist())) \
            if values.size else b""
    return _len_field(_FIELD_OF[kind], inner)


def make_example(features: Mapping[str, Any]) -> bytes:
    """Serialize ``{name: values}`` as a ``tf.train.Example`` (``tf.train.Example(...).SerializeToString()``).

    Values are ints/bools (``int64_list``), floats (``float_list``, stored as
    float32) or bytes/str (``bytes_list``, str as UTF-8), alone or as lists,
    numpy arrays or tensors (flattened).  Keys are written sorted, as
    TensorFlow's deterministic serialization does, so equal inputs give equal
    bytes.

    Example:
        >>> make_example({"label": 1}).hex()
        '0a100a0e0a056c6162656c12051a030a0101'
    """
    if not isinstance(features, Mapping):
        raise InvalidTypeError(explain("make_example(features)", type(features).__name__,
                                       "must be a dict of feature name to values",
                                       "pass {'label': 3, 'image': image_bytes}"))
    pairs = [(str(name), *_kind_and_values(str(name), features[name]))
             for name in sorted(features, key=lambda k: str(k).encode())]
    if _example_pb.AVAILABLE:
        return _pb_example(pairs)
    entries = b""
    for name, kind, values in pairs:
        entry = _len_field(1, name.encode()) + _len_field(2, _encode_feature(kind, values))
        entries += _len_field(1, entry)
    return _len_field(1, entries)


def _pb_example(pairs: list[tuple[str, str, Any]]) -> bytes:
    ex = _example_pb.Example()
    ex.features.SetInParent()           # an Example with no features still has them (TF)
    feature = ex.features.feature
    for name, kind, values in pairs:
        target = getattr(feature[name], _FIELD_NAME[kind])
        target.SetInParent()
        target.value.extend(values if kind == "bytes" else values.tolist())
    out: bytes = ex.SerializeToString(deterministic=True)
    return out


_FIELD_NAME = {"bytes": "bytes_list", "float": "float_list", "int64": "int64_list"}
