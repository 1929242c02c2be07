"""Checking that every replica process holds the same input data.

TensorFlow's MirroredStrategy is one process: the arrays given to ``fit`` exist
once.  distrib runs the program once per replica, and each process builds its own
arrays; a program that makes its data with an unseeded random generator, or reads
a file that differs between machines, gets different arrays in each process —
``fit`` then trains on half of each, and ``predict`` returns predictions for rows
that the chief does not hold.  So ``fit``, ``evaluate`` and ``predict`` compare a
checksum of every in-memory array across the replicas once per call (one small
all-gather of BLAKE2b checksums) and raise an error that names the array, the replicas
and the fix.  For a generator or a ``distrib.utils.Sequence`` the first batch is
compared the same way.

The checksum covers an array's shape, dtype and bytes: all of them up to 4 MiB (the
bundled digits' training images are 4.5 MB as float32), beyond that 256 pieces of 16 KiB
spread evenly from its first byte to its last, so that its cost per call is bounded
(about 7 ms on this project's 2-core test machine, where hashing all of 188 MB took
0.3 s, a fixed cost on every ``fit`` call).  That catches what the check is for — data
drawn from unseeded generators, a different file, a different shuffle, a different
length — and can miss a difference confined to a few bytes between the pieces of a
large array.

Example:
    >>> import numpy as np
    >>> checksum(np.arange(4)) == checksum(np.arange(4)), checksum(np.arange(4)) == checksum(np.ones(4))
    (True, False)
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.errors import DataError, explain

__all__ = ["checksum", "check_same_arrays"]


def _bytes_of(value: Any) -> tuple[memoryview, str]:
    """The raw bytes of an array or tensor (no copy when contiguous) and its description."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        desc = f"{tuple(t.shape)}{t.dtype}"
        flat = t.reshape(-1)
        raw: Any = flat.view(torch.uint8).numpy() if t.numel() else b""
        return memoryview(raw), desc
    a: Any = np.ascontiguousarray(value)
    return memoryview(a).cast("B") if a.size else memoryview(b""), f"{a.shape}{a.dtype}"


_ALL_BYTES = 4 << 20  # arrays up to this size are hashed whole
_PIECES, _PIECE_BYTES = 256, 16 << 10  # beyond it: this many pieces of this size


def checksum(value: Any) -> int:
    """A 63-bit checksum of an array's shape, dtype and bytes (BLAKE2b).

    Beyond 4 MiB of bytes, 256 pieces of 16 KiB spread evenly from the first byte to the
    last stand for the whole (the same pieces on every replica: their places follow from
    the size, which the checksum also covers).

    Example:
        >>> checksum(torch.zeros(2)) == checksum(torch.zeros(3))
        False
    """
    data, desc = _bytes_of(value)
    h = hashlib.blake2b(desc.encode(), digest_size=8)
    if len(data) <= _ALL_BYTES:
        h.update(data)
    else:
        last = len(data) - _PIECE_BYTES
        for i in range(_PIECES):
            start = last * i // (_PIECES - 1)
            h.update(data[start:start + _PIECE_BYTES])
    return int.from_bytes(h.digest(), "big") >> 1


def _leaves(named: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in named.items():
        leaves = [v for v in nest.flatten(value) if v is not None]
        arrays = [v for v in leaves if isinstance(v, (np.ndarray, torch.Tensor))]
        if not arrays or len(arrays) != len(leaves):
            continue  # not in-memory arrays (a dataset, a generator): checked elsewhere
        for i, leaf in enumerate(arrays):
            out.append((name if len(arrays) == 1 else f"{name}[{i}]", leaf))
    return out


def check_same_arrays(strategy: Any, named: dict[str, Any], what: str = "arrays") -> None:
    """Raise :class:`~distrib.errors.DataError` on every replica unless all hold the same
    arrays under each name (the error every input path raises for differing data).

    ``named`` maps a name (``"x"``, ``"y"``, ...) to arrays, tensors or nests of them;
    other values are skipped.  Every replica must call it with the same names: one
    all-gather of the checksums, nothing on a single replica.
    """
    replicas = int(strategy.extended.replica_group.num_replicas_in_sync)  # processes
    if replicas == 1:
        return
    leaves = _leaves(named)
    rows = strategy.extended.replica_group.each_list([checksum(v) for _, v in leaves])
    differing = [r for r in range(replicas) if rows[r] != rows[0]]
    if not differing:
        return
    names = [name for i, (name, _) in enumerate(leaves)
             if any(i >= len(rows[r]) or rows[r][i] != rows[0][i] for r in differing)]
    raise DataError(explain(
        f"input {what}", names or [name for name, _ in leaves],
        f"replica(s) {differing} hold different values from replica 0. Every replica "
        "process runs this program and builds its own data; with different data, fit "
        "trains on a mix of them and predict returns predictions for rows the chief "
        "does not hold",
        "make the data identically in every process: seed the random generators before "
        "creating it (np.random.seed(0), torch.manual_seed(0), random.seed(0)), or load "
        "it from the same file; or give each replica its own part of the data through "
        "strategy.distribute_datasets_from_function"))
