"""The data format of distrib's RPC messages: JSON structure plus raw tensor buffers.

A message is ``b"DWR1" | header length (4 bytes) | header (JSON) | buffers``.  The
header describes a value made of ``None``, booleans, numbers, strings, bytes, lists,
tuples, dicts, torch tensors and numpy arrays; every tensor or array travels as its
raw bytes, located in the header by offset together with its dtype and shape.
Nothing is ever unpickled: decoding only builds those types, so a message from an
unauthenticated peer can do no more than carry wrong numbers.

Example:
    >>> import torch
    >>> out = decode(encode({"step": 3, "w": torch.arange(4.0)}))
    >>> out["step"], out["w"]
    (3, tensor([0., 1., 2., 3.]))
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import torch

from distrib.errors import UsageError, explain

__all__ = ["encode", "decode", "tensor_bytes", "TORCH_DTYPES"]

_MAGIC = b"DWR1"
_LEN = struct.Struct("<I")

#: The tensor dtypes that may travel, by name.
TORCH_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
        torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
        torch.complex128)}
_NUMPY_KINDS = "biufc"  # bool, int, uint, float, complex: never object arrays


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of ``t`` (moved to the CPU and made contiguous), without a copy if it is."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    flat = t.contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]


class _Encoder:
    def __init__(self) -> None:
        self.buffers: list[memoryview] = []
        self.offset = 0

    def _add(self, buf: memoryview) -> list[int]:
        where = [self.offset, buf.nbytes]
        self.buffers.append(buf)
        self.offset += buf.nbytes
        return where

    def value(self, v: Any) -> Any:  # noqa: C901 - one branch per wire type
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else ["f", repr(v)]
        if isinstance(v, torch.Tensor):
            name = str(v.dtype).removeprefix("torch.")
            if name not in TORCH_DTYPES:
                raise UsageError(explain("tensor dtype", v.dtype, "cannot travel between tasks",
                                         f"use one of {sorted(TORCH_DTYPES)}"))
            return ["T", name, list(v.shape), *self._add(tensor_bytes(v))]
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in _NUMPY_KINDS:
                raise UsageError(explain("array dtype", v.dtype, "only numeric and bool "
                                         "arrays travel between tasks", "convert the array"))
            arr = np.ascontiguousarray(v)
            return ["N", arr.dtype.str, list(arr.shape),
                    *self._add(memoryview(arr.reshape(-1).view(np.uint8)))]  # type: ignore[arg-type]
        if isinstance(v, np.generic):
            return self.value(v.item())
        if isinstance(v, (bytes, bytearray, memoryview)):
            return ["B", *self._add(memoryview(bytes(v)))]
        if isinstance(v, tuple):
            return ["t", [self.value(x) for x in v]]
        if isinstance(v, list):
            return ["l", [self.value(x) for x in v]]
        if isinstance(v, dict):
            return ["d", [[self.value(k), self.value(x)] for k, x in v.items()]]
        raise UsageError(explain("value", type(v).__name__, "cannot travel between tasks as "
                                 "data (tensors, arrays, numbers, strings, bytes, None and "
                                 "lists, tuples and dicts of them can)",
                                 "return tensors or numbers from the function"))


def encode(value: Any) -> bytes:
    """Serialise ``value`` (see the module docstring for the types allowed).

    Example:
        >>> decode(encode((1, "a", None)))
        (1, 'a', None)
    """
    enc = _Encoder()
    header = json.dumps(enc.value(value), separators=(",", ":")).encode()
    return b"".join([_MAGIC, _LEN.pack(len(header)), header, *enc.buffers])


def _tensor(data: memoryview, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    if data.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)


class _Decoder:
    def __init__(self, data: memoryview) -> None:
        self.data = data

    def _slice(self, offset: int, size: int) -> memoryview:
        if offset < 0 or size < 0 or offset + size > self.data.nbytes:
            raise UsageError(explain("message", f"buffer at {offset}+{size}", "points outside "
                                     "the message", "send messages made by distrib.rpc.wire"))
        return self.data[offset:offset + size]

    def value(self, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        tag, rest = v[0], v[1:]
        if tag == "T":
            name, shape, offset, size = rest
            return _tensor(self._slice(offset, size), TORCH_DTYPES[name], shape)
        if tag == "N":
            dtype = np.dtype(rest[0])
            if dtype.kind not in _NUMPY_KINDS:
                raise UsageError(explain("array dtype", rest[0], "is not allowed", "-"))
            buf = self._slice(rest[2], rest[3])
            return np.frombuffer(buf, dtype=dtype).reshape(rest[1])
        if tag == "B":
            return bytes(self._slice(rest[0], rest[1]))
        if tag == "f":
            return float(rest[0])
        if tag == "t":
            return tuple(self.value(x) for x in rest[0])
        if tag == "l":
            return [self.value(x) for x in rest[0]]
        if tag == "d":
            return {_key(self.value(k)): self.value(x) for k, x in rest[0]}
        raise UsageError(explain("message tag", tag, "is unknown", "send messages made by "
                                 "distrib.rpc.wire"))


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def decode(message: bytes | bytearray | memoryview) -> Any:
    """The value :func:`encode` serialised; tensors and arrays share one writable copy of it.

    Raises:
        UsageError: the bytes are not a message of this format.
    """
    data = memoryview(bytearray(message))
    if data.nbytes < 8 or bytes(data[:4]) != _MAGIC:
        raise UsageError(explain("message", bytes(data[:8]), "is not a distrib RPC message",
                                 "connect only distrib tasks of the same version to each other"))
    (size,) = _LEN.unpack(data[4:8])
    header = json.loads(bytes(data[8:8 + size]))
    return _Decoder(data[8 + size:]).value(header)
