"""``tf.train.Example`` without TensorFlow or protobuf: the wire format, read and written.

An Example is ``Example{features: Features{feature: map<string, Feature>}}``,
where a ``Feature`` holds one of ``bytes_list`` (field 1), ``float_list`` (2)
or ``int64_list`` (3), each a message with one repeated ``value`` field
(packed or not: both are read).  :func:`decode_example` turns serialized bytes
into ``{name: (kind, values)}``; :func:`make_example` writes the bytes that
``tf.train.Example.SerializeToString(deterministic=True)`` writes.

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

from distrib.errors import DataError, InvalidTypeError, explain

__all__ = ["decode_example", "make_example", "KINDS"]

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
    if kind == "bytes":
        return [buf[s:e] for f, w, s, e in _fields(buf, start, stop) if f == 1 and w == 2]
    floats: list[Any] = []
    ints: list[Any] = []
    for f, w, s, e in _fields(buf, start, stop):
        if f != 1:
            continue
        if kind == "float":
            if w == 2:
                if (e - s) % 4:
                    raise _Malformed(f"a packed float list at byte {s} is cut off")
                floats.append(np.frombuffer(buf, dtype="<f4", count=(e - s) // 4, offset=s))
            elif w == 5:
                floats.append(np.array(struct.unpack_from("<f", buf, s), dtype=np.float32))
        elif w == 2:
            ints.append(_packed_varints(buf, s, e))
        elif w == 0:
            ints.append(np.array([s - (1 << 64) if s >= 1 << 63 else s], dtype=np.int64))
    parts = floats if kind == "float" else ints
    dtype = np.float32 if kind == "float" else np.int64
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0].astype(dtype) if len(parts) == 1 else np.concatenate(parts).astype(dtype)


def _feature(buf: bytes, start: int, stop: int) -> tuple[str | None, Any]:
    """The first list of a Feature message (later ones are ignored, as TF's parser does)."""
    for f, w, s, e in _fields(buf, start, stop):
        if w == 2 and f in KINDS:
            return KINDS[f], _list_values(buf, KINDS[f], s, e)
    return None, None


def decode_example(serialized: bytes | bytearray | memoryview) -> dict[str, tuple[str | None, Any]]:
    """``{name: (kind, values)}`` of a serialized ``tf.train.Example``.

    ``kind`` is ``"bytes"`` (values: a list of bytes), ``"float"`` (float32
    array), ``"int64"`` (int64 array), or None for a Feature with no list.

    Example:
        >>> decode_example(make_example({"n": [1, -2]}))
        {'n': ('int64', array([ 1, -2]))}
    """
    buf = bytes(serialized)
    out: dict[str, tuple[str | None, Any]] = {}
    try:
        for f, w, s, e in _fields(buf, 0, len(buf)):
            if f != 1 or w != 2:
                continue
            for ff, fw, fs, fe in _fields(buf, s, e):
                if ff != 1 or fw != 2:
                    continue
                key: str = ""
                value: tuple[str | None, Any] = (None, None)
                for ef, ew, es, ee in _fields(buf, fs, fe):
                    if ef == 1 and ew == 2:
                        key = buf[es:ee].decode("utf-8")
                    elif ef == 2 and ew == 2:
                        value = _feature(buf, es, ee)
                out[key] = value
    except (_Malformed, UnicodeDecodeError) as err:
        raise DataError(explain("serialized", _preview(buf),
                                f"Could not parse example input: {err}",
                                "pass the bytes of a serialized tf.train.Example (a record of "
                                "a TFRecord file of Examples)")) from None
    return out


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
    entries = b""
    for name in sorted(features, key=lambda k: str(k).encode()):
        kind, values = _kind_and_values(str(name), features[name])
        entry = _len_field(1, str(name).encode()) + _len_field(2, _encode_feature(kind, values))
        entries += _len_field(1, entry)
    return _len_field(1, entries)
