"""The file format of ``Dataset.cache(filename)``: TFRecord framing around safe chunks.

A cache file is a TFRecord file (every record checksummed):

1. a header: JSON with the format name and version, the pipeline's
   fingerprint, the element structure and one descriptor per component;
2. chunks of elements: ``torch.save`` of a dict of tensors, ints and strings
   only — read back with ``torch.load(weights_only=True)``, so loading never
   runs code.  Each component is a *column*: a stacked tensor when every
   element has the same shape, else a list of tensors; strings are one uint8
   tensor of their bytes with an offsets tensor;
3. a footer: JSON with the number of elements.

Example:
    >>> rows = [[torch.tensor(1), b"a"], [torch.tensor(2), b"bc"]]
    >>> decode_chunk(encode_chunk(rows))[1]
    [tensor(2), b'bc']
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import torch

from distrib.errors import DataError, explain

__all__ = ["FORMAT", "VERSION", "describe_leaf", "encode_chunk", "decode_chunk", "header",
           "footer", "read_json"]

FORMAT = "distrib.data.cache"
VERSION = 1


def describe_leaf(x: Any) -> str:
    """A short description of one component (kind and dtype) for the header.

    Example:
        >>> describe_leaf(torch.zeros(2)), describe_leaf("a")
        ('tensor:torch.float32', 'str')
    """
    if x is None:
        return "none"
    if isinstance(x, torch.Tensor):
        return f"tensor:{x.dtype}"
    if isinstance(x, (str, bytes)):
        return type(x).__name__
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        return "strings"
    raise DataError(explain("cached element component", type(x).__name__,
                            "cache(filename) stores tensors, strings and arrays of strings",
                            "convert the component to a tensor before cache()"))


def _join(strings: list[bytes]) -> dict[str, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in strings], dtype=torch.int64)
    data = torch.frombuffer(bytearray(b"".join(strings)), dtype=torch.uint8) \
        if lengths.sum() else torch.zeros(0, dtype=torch.uint8)
    return {"data": data, "lengths": lengths}


def _split(blob: dict[str, torch.Tensor]) -> list[bytes]:
    raw = blob["data"].numpy().tobytes()
    ends = np.cumsum(blob["lengths"].numpy())
    starts = ends - blob["lengths"].numpy()
    return [raw[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def _encode_column(values: list[Any]) -> dict[str, Any]:
    kinds = {describe_leaf(v) for v in values}
    if len(kinds) != 1:
        raise DataError(explain("cached component", sorted(kinds),
                                "must be of one kind and dtype in every element",
                                "make the pipeline return the same types for every element"))
    kind = kinds.pop()
    first = values[0]
    if kind == "none":
        return {"kind": "none"}
    if kind in ("bytes", "str"):
        return {"kind": kind, **_join([v.encode() if kind == "str" else v for v in values])}
    if kind == "strings":
        flat = [s for v in values for s in v.ravel().tolist()]
        text = first.dtype.kind == "U"
        return {"kind": "strings", "text": text,
                "shapes": torch.tensor([list(v.shape) for v in values], dtype=torch.int64),
                **_join([s.encode() if isinstance(s, str) else bytes(s) for s in flat])}
    if all(v.shape == first.shape for v in values):
        return {"kind": "stack", "tensor": torch.stack([v.detach().cpu() for v in values])}
    return {"kind": "tensors", "tensors": [v.detach().cpu().clone() for v in values]}


def _decode_column(col: dict[str, Any], n: int) -> list[Any]:
    kind = col["kind"]
    if kind == "none":
        return [None] * n
    if kind == "stack":
        return list(col["tensor"].unbind(0))
    if kind == "tensors":
        return list(col["tensors"])
    strings = _split(col)
    if kind == "bytes":
        return strings
    if kind == "str":
        return [s.decode() for s in strings]
    out, pos = [], 0
    for shape in col["shapes"].tolist():
        size = int(np.prod(shape)) if shape else 1
        part = strings[pos:pos + size]
        pos += size
        arr = np.array([s.decode() for s in part]) if col["text"] else \
            np.array(part, dtype=object)
        out.append(arr.reshape(shape))
    return out


def encode_chunk(rows: list[list[Any]]) -> bytes:
    """The bytes of a chunk: ``rows[i]`` are the flat components of element ``i``."""
    columns = [_encode_column(list(col)) for col in zip(*rows)]
    buf = io.BytesIO()
    torch.save({"n": len(rows), "columns": columns}, buf)
    return buf.getvalue()


def decode_chunk(blob: bytes) -> list[list[Any]]:
    """The rows of a chunk written by :func:`encode_chunk` (loaded with ``weights_only``)."""
    chunk = torch.load(io.BytesIO(blob), weights_only=True)
    n = int(chunk["n"])
    columns = [_decode_column(col, n) for col in chunk["columns"]]
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in range(n)]


def header(fingerprint: str, structure: str, leaves: list[str]) -> bytes:
    """The first record of a cache file."""
    return json.dumps({"format": FORMAT, "version": VERSION, "fingerprint": fingerprint,
                       "structure": structure, "leaves": leaves}).encode()


def footer(elements: int, format_name: str = FORMAT) -> bytes:
    """The last record of a cache file (or of another ``format_name`` file)."""
    return json.dumps({"format": format_name, "elements": elements}).encode()


def read_json(record: bytes, format_name: str = FORMAT) -> dict[str, Any] | None:
    """A header or footer record of the ``format_name`` files, or None when ``record`` is
    not one."""
    if not record.startswith(b"{"):
        return None
    try:
        value = json.loads(record)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("format") == format_name else None
