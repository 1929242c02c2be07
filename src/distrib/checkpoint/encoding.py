"""The safe encoding of checkpoint state: JSON for the structure, tensors for the data.

A checkpoint holds state dicts of every kind — module and optimizer state, iterator
positions, counters, random-number-generator states, callback states.  Their
*structure* and small values (dicts with int keys, tuples, numbers, strings) are
written as JSON; every tensor or numpy array is replaced by a reference to a tensor
stored by ``torch.distributed.checkpoint``.  Reading a checkpoint therefore parses
JSON and loads tensors with ``torch.load(weights_only=True)``: nothing in the file
can run code.  (``optree``'s tree specs only serialise with pickle, which is why
this small encoder exists.)

Example:
    >>> tensors = TensorTable()
    >>> doc = encode({"step": 3, "w": torch.ones(2), 0: (1.5, None)}, "opt", tensors.put)
    >>> sorted(tensors.tensors), decode(doc, tensors.tensors.__getitem__)[0]
    (['opt/w'], (1.5, None))
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from distrib.errors import CheckpointError, explain

__all__ = ["encode", "decode", "json_tensor", "tensor_json", "TensorTable"]

Put = Callable[[str, torch.Tensor], str]

_TENSOR, _ARRAY, _DICT, _LIST, _TUPLE = "$tensor", "$ndarray", "$dict", "$list", "$tuple"
_NPSCALAR, _DTYPE, _DEVICE = "$npscalar", "$dtype", "$device"


def _unsupported(path: str, value: Any) -> CheckpointError:
    return CheckpointError(explain(
        f"checkpoint entry {path!r}", type(value).__name__,
        "a checkpoint stores tensors, numpy arrays, numbers, strings, None, and "
        "dicts, lists and tuples of them", "convert the value (or keep it out of the "
        "state_dict of the object that returns it)"))


def _key_part(key: Any) -> str:
    return str(key).replace("/", "_")


class TensorTable:
    """The tensors of a checkpoint by key; :meth:`put` keeps every key unique."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def put(self, key: str, tensor: torch.Tensor) -> str:
        """Store ``tensor`` under ``key`` (``key~1``, ``key~2``... if taken); returns the key."""
        unique, n = key, 0
        while unique in self.tensors:
            n += 1
            unique = f"{key}~{n}"
        self.tensors[unique] = tensor
        return unique


def encode(value: Any, path: str, put: Put) -> Any:
    """The JSON document of ``value``; each tensor goes to ``put(key, tensor)``.

    Keys are ``path`` extended by the dict keys and list indices leading to the
    tensor, so a tensor's key says where it lives (``"model/module/fc.weight"``).
    """
    if isinstance(value, torch.Tensor):
        return {_TENSOR: put(path, value.detach())}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise _unsupported(path, value)
        return {_ARRAY: put(path, torch.from_numpy(np.ascontiguousarray(value)))}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)) and type(value) in (int, float):
        return value
    if isinstance(value, np.generic):
        return {_NPSCALAR: [value.dtype.str, value.item()]}
    if isinstance(value, (int, float)):  # a subclass such as np.float64 or IntEnum
        return int(value) if isinstance(value, int) else float(value)
    if isinstance(value, dict):
        return {_DICT: [[encode(k, f"{path}/#key", _no_tensor(path)),
                         encode(v, f"{path}/{_key_part(k)}", put)] for k, v in value.items()]}
    if isinstance(value, list):
        return {_LIST: [encode(v, f"{path}/{i}", put) for i, v in enumerate(value)]}
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v, f"{path}/{i}", put) for i, v in enumerate(value)]}
    if isinstance(value, torch.dtype):
        return {_DTYPE: str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {_DEVICE: str(value)}
    raise _unsupported(path, value)


def _no_tensor(path: str) -> Put:
    def put(key: str, tensor: torch.Tensor) -> str:
        raise CheckpointError(explain(f"checkpoint entry {path!r}", "a tensor dict key",
                                      "dict keys must be numbers, strings or tuples",
                                      "use plain keys"))
    return put


def decode(doc: Any, get: Callable[[str], torch.Tensor]) -> Any:
    """The value :func:`encode` described, with tensors from ``get(key)``."""
    if not isinstance(doc, dict):
        if isinstance(doc, list):
            raise CheckpointError("malformed checkpoint structure: a bare JSON list")
        return doc
    if len(doc) != 1:
        raise CheckpointError(f"malformed checkpoint structure: {sorted(doc)[:3]}")
    tag, body = next(iter(doc.items()))
    if tag == _TENSOR:
        return get(body)
    if tag == _ARRAY:
        return get(body).numpy()
    if tag == _DICT:
        return {_hashable(decode(k, get)): decode(v, get) for k, v in body}
    if tag == _LIST:
        return [decode(v, get) for v in body]
    if tag == _TUPLE:
        return tuple(decode(v, get) for v in body)
    if tag == _NPSCALAR:
        return np.dtype(body[0]).type(body[1])
    if tag == _DTYPE:
        dtype = getattr(torch, str(body), None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"malformed checkpoint structure: unknown dtype {body!r}")
        return dtype
    if tag == _DEVICE:
        return torch.device(str(body))
    raise CheckpointError(f"malformed checkpoint structure: unknown tag {tag!r}")


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


def json_tensor(doc: Any) -> torch.Tensor:
    """A JSON document as a uint8 tensor (how the structure travels inside the checkpoint).

    Example:
        >>> tensor_json(json_tensor({"a": [1, 2]}))
        {'a': [1, 2]}
    """
    data = json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def tensor_json(tensor: torch.Tensor) -> Any:
    """The JSON document stored by :func:`json_tensor`."""
    try:
        return json.loads(tensor.numpy().tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"malformed checkpoint structure (not JSON): {exc}") from None
