"""A cheap fingerprint of a batch, for replicas to check they read the same data.

Replicas are separate processes that each build the input pipeline; where they must
share its source (the global batch is split between them), a pipeline built from
data that differs between processes (``np.random`` drawn once more on the chief, a
file that changed) would train on a mix without any error.  The distributed iterator
fingerprints the *global* batch of the first step of each epoch and of a few
sampled steps after it (steps 1, 2, 4, 8, ...: about log2(steps) per epoch), and the
step engine compares the replicas' fingerprints with the step's agreement on rows.

Example:
    >>> digest_of((torch.zeros(2, 3), torch.ones(2))) == digest_of((torch.zeros(2, 3), torch.ones(2)))
    True
    >>> checked_step(0, 0), checked_step(5, 0), checked_step(8, 0)
    (True, False, True)
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from distrib import nest

__all__ = ["digest_of", "checked_step"]

_MASK = (1 << 62) - 1


def checked_step(step: int, start: int) -> bool:
    """Whether the global batch of ``step`` is fingerprinted (an epoch started at ``start``)."""
    k = step - start
    return k >= 0 and (k & (k - 1)) == 0


def digest_of(batch: Any) -> int:
    """A 62-bit fingerprint of every tensor's dtype, shape and bytes in ``batch``."""
    h = hashlib.blake2b(digest_size=8)
    for leaf in nest.flatten(batch):
        if isinstance(leaf, torch.Tensor):
            t = leaf.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(leaf, np.ndarray):
            h.update(f"{leaf.dtype}{leaf.shape}".encode())
            h.update(np.ascontiguousarray(leaf).tobytes())
        else:
            h.update(repr(leaf).encode())
    return int.from_bytes(h.digest(), "little") & _MASK
