"""Functions and objects sent to workers: pickled code, references, raw tensor buffers.

A scheduled function has to run on a worker that did not run the chief's program
past the strategy's creation, so the function travels by value (``cloudpickle``:
functions and classes of the user's script, lambdas, closures), but only over a
channel authenticated with the cluster's secret (:mod:`distrib.rpc.auth`); the
receiving side unpickles nothing that was not signed with that secret.

Two things never travel inside the pickle stream:

* objects the strategy already placed on the workers — its modules' parameters,
  the modules, optimizers, per-worker datasets — travel as *references* that the
  worker resolves to its own copy (``refs`` on the sending side, ``resolve`` on
  the receiving side);
* tensors and numpy arrays travel as raw buffers next to the stream, with their
  dtype and shape (numpy through pickle protocol 5's out-of-band buffers).

Example:
    >>> import torch
    >>> blob = dumps((lambda x: x + 1, torch.ones(2)))
    >>> fn, t = loads(blob)
    >>> fn(t)
    tensor([2., 2.])
"""

from __future__ import annotations

import io
import json
import pickle
import struct
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch

from distrib.errors import UsageError, explain
from distrib.rpc.wire import TORCH_DTYPES, tensor_bytes

__all__ = ["dumps", "loads", "Refs", "Resolve"]

Refs = Callable[[Any], "tuple[Any, ...] | None"]
Resolve = Callable[[tuple[Any, ...]], Any]
_MAGIC = b"DPK1"
_LEN = struct.Struct("<I")


def _no_refs(obj: Any) -> tuple[Any, ...] | None:
    return None


def _no_resolve(ref: tuple[Any, ...]) -> Any:
    raise UsageError(explain("reference", ref, "this message refers to an object the "
                             "receiving task does not hold", "send it by value"))


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def __init__(self, file: io.BytesIO, refs: Refs, tensors: list[memoryview],
                 oob: list[pickle.PickleBuffer]) -> None:
        super().__init__(file, protocol=5, buffer_callback=oob.append)
        self._refs = refs
        self._tensors = tensors

    def persistent_id(self, obj: Any) -> Any:
        ref = self._refs(obj)
        if ref is not None:
            return ("ref", *ref)
        if isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter):
            name = str(obj.dtype).removeprefix("torch.")
            if name not in TORCH_DTYPES:
                return None
            self._tensors.append(tensor_bytes(obj))
            return ("tensor", len(self._tensors) - 1, name, list(obj.shape),
                    isinstance(obj, torch.nn.Parameter), bool(obj.requires_grad))
        return None


def dumps(obj: Any, refs: Refs = _no_refs) -> bytes:
    """Serialise ``obj``; objects for which ``refs(obj)`` gives a tuple travel as that reference.

    Example:
        >>> loads(dumps([1, "two"]))
        [1, 'two']
    """
    stream = io.BytesIO()
    tensors: list[memoryview] = []
    oob: list[pickle.PickleBuffer] = []
    _Pickler(stream, refs, tensors, oob).dump(obj)
    parts = [memoryview(stream.getvalue()), *(b.raw() for b in oob), *tensors]
    header = json.dumps({"n_oob": len(oob), "sizes": [p.nbytes for p in parts]}).encode()
    return b"".join([_MAGIC, _LEN.pack(len(header)), header, *parts])


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffers: list[memoryview], tensors: list[memoryview],
                 resolve: Resolve) -> None:
        super().__init__(file, buffers=buffers)
        self._tensors = tensors
        self._resolve = resolve

    def persistent_load(self, pid: Any) -> Any:
        kind, *rest = pid
        if kind == "ref":
            return self._resolve(tuple(rest))
        if kind == "tensor":
            index, name, shape, is_param, requires_grad = rest
            data = self._tensors[index]
            dtype = TORCH_DTYPES[name]
            t = (torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)
                 if data.nbytes else torch.empty(shape, dtype=dtype))
            if is_param:
                return torch.nn.Parameter(t, requires_grad=requires_grad)
            return t.requires_grad_(requires_grad) if requires_grad else t
        raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")


def loads(message: bytes, resolve: Resolve = _no_resolve) -> Any:
    """The object :func:`dumps` serialised; references are given to ``resolve``.

    Only call this on messages whose sender was authenticated: unpickling runs code.
    """
    data = memoryview(bytearray(message))
    if data.nbytes < 8 or bytes(data[:4]) != _MAGIC:
        raise UsageError(explain("message", bytes(data[:8]), "is not a distrib pickle message",
                                 "connect only distrib tasks of the same version"))
    (size,) = _LEN.unpack(data[4:8])
    header = json.loads(bytes(data[8:8 + size]))
    parts: list[memoryview] = []
    pos = 8 + size
    for n in header["sizes"]:
        parts.append(data[pos:pos + n])
        pos += n
    n_oob = header["n_oob"]
    stream, oob, tensors = parts[0], parts[1:1 + n_oob], parts[1 + n_oob:]
    return _Unpickler(io.BytesIO(bytes(stream)), oob, tensors, resolve).load()
