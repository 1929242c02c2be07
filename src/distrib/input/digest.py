"""A cheap fingerprint of a batch, for replicas to check they read the same data.

Replicas are separate processes that each build the input pipeline; where they must
share its source (the global batch is split between them), a pipeline built from
data that differs between processes (``np.random`` drawn once more on the chief, a
file that changed) would train on a mix without any error.  The distributed iterator
fingerprints the *global* batch of the first step of each epoch and of a few
sampled steps after it (steps 1, 2, 4, 8, ...: about log2(steps) per epoch), and the
step engine compares the replicas' fingerprints with the step's agreement on rows.

The replicas that split one pipeline's global batches compare with every replica; the
replicas of a worker that take the batches of one ``dataset_fn`` pipeline in turn compare
within their worker (:data:`WORKER_SCOPE`).

Example:
    >>> digest_of((torch.zeros(2, 3), torch.ones(2))) == digest_of((torch.zeros(2, 3), torch.ones(2)))
    True
    >>> checked_step(0, 0), checked_step(5, 0), checked_step(8, 0)
    (True, False, True)
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.errors import DataError, explain

__all__ = ["digest_of", "checked_step", "WORKER_SCOPE", "same_data", "check_same_data"]

_MASK = (1 << 62) - 1
WORKER_SCOPE = 1 << 62
"""Set in a fingerprint that only the replicas of one worker share (they take the batches
of one ``dataset_fn`` pipeline in turn; other workers' pipelines may differ)."""


def same_data(every: list[int], local_replicas: int) -> list[int]:
    """The replica ids (by position in ``every``, one fingerprint per replica, -1 where a
    replica took none) whose fingerprint differs from the one it must equal: replica 0's,
    or its worker's first replica's for fingerprints with :data:`WORKER_SCOPE`.

    Example:
        >>> same_data([5, 5, 7], 1), same_data([WORKER_SCOPE | 5, WORKER_SCOPE | 5,
        ...                                     WORKER_SCOPE | 7, WORKER_SCOPE | 7], 2)
        ([2], [])
        >>> same_data([-1, 5, 5], 1), same_data([5, -1], 1)
        ([], [])
    """
    per_worker = any(d >= 0 and d & WORKER_SCOPE for d in every)
    step = max(1, local_replicas) if per_worker else len(every)
    differ = []
    for r, d in enumerate(every):  # a replica that took no batch (-1) compares nothing
        scope = [e for e in every[r - r % step:r - r % step + step] if e != -1]
        if d != -1 and scope and d != scope[0]:
            differ.append(r)
    return differ


def check_same_data(every: list[int], local_replicas: int) -> None:
    """Raise :class:`~distrib.errors.DataError`, on every replica alike, when the
    replicas' fingerprints (``every``: one per replica, by id) differ (:func:`same_data`)."""
    differ = same_data(every, local_replicas)
    if differ:
        raise DataError(explain(
            "input data", f"replica(s) {differ} read a different global batch than "
            "replica 0 (or than their worker's first replica)", "replicas that split one "
            "dataset, or take the batches of one worker's pipeline in turn, must build it "
            "from the same "
            "data (each replica process builds the pipeline itself; here the batch "
            "its replicas split differs: data drawn at random per process, a file "
            "that changed, a different argument)", "build the data identically in "
            "every process (seed numpy before drawing, e.g. np.random.seed(0), and "
            "draw the same values everywhere), or give each replica its own data "
            "with strategy.distribute_datasets_from_function"))


def checked_step(step: int, start: int) -> bool:
    """Whether the global batch of ``step`` is fingerprinted (an epoch started at ``start``)."""
    k = step - start
    return k >= 0 and (k & (k - 1)) == 0


def digest_of(batch: Any) -> int:
    """A 62-bit fingerprint of every tensor's dtype, shape and bytes in ``batch``: a CRC-32
    of the bytes (zlib's, about 7 GB/s) beside a CRC-32 of the dtypes and shapes."""
    data, header = 0, 0
    for leaf in nest.flatten(batch):
        if isinstance(leaf, torch.Tensor):
            t = leaf.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            header = zlib.crc32(f"{t.dtype}{tuple(t.shape)}".encode(), header)
            if t.numel():
                data = zlib.crc32(t.contiguous().reshape(-1).view(torch.uint8).numpy()
                                  .tobytes(), data)
        elif isinstance(leaf, np.ndarray):
            header = zlib.crc32(f"{leaf.dtype}{leaf.shape}".encode(), header)
            data = zlib.crc32(np.ascontiguousarray(leaf).tobytes(), data)
        else:
            header = zlib.crc32(repr(leaf).encode(), header)
    return ((data << 30) ^ header) & _MASK
