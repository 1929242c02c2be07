"""Gather tensors of many sizes, dtypes and axes over two replicas; record got vs expected.

Usage: python gathers.py OUT_DIR   -> OUT_DIR/replica<i>.json

Each case makes replica ``r``'s part with ``make(r)`` (deterministic), gathers it over the
replica group, and compares the result with the oracle: ``torch.cat`` of both parts, made
in this one process.  Parts that fit in the first collective (up to 1 KiB each), parts
that need the second one, parts of different lengths, empty parts and the boundary sizes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import distrib


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


CASES: dict[str, tuple[Callable[[int], torch.Tensor], int]] = {
    "int64, lengths 3 and 4": (lambda r: torch.arange(3 + r, dtype=torch.int64), 0),
    "float32 rows, lengths 2 and 3": (lambda r: _randn(2 + r, 5, seed=r), 0),
    "float16, replica 0 empty": (lambda r: torch.ones(r, 4, dtype=torch.float16), 0),
    "both empty": (lambda r: torch.zeros(0, 3), 0),
    "bool": (lambda r: torch.tensor([True, r == 1, False]), 0),
    "complex128": (lambda r: torch.full((2,), complex(r, 1), dtype=torch.complex128), 0),
    "axis 1": (lambda r: _randn(3, 2 + r, seed=r), 1),
    "exactly 1 KiB each": (lambda r: torch.arange(128, dtype=torch.int64) * (r + 1), 0),
    "1 KiB and 1 KiB + 8": (lambda r: torch.arange(128 + r, dtype=torch.int64), 0),
    "large, second collective": (lambda r: _randn(100 + 50 * r, 7, seed=r), 0),
    "one small one large": (lambda r: _randn(2 if r else 400, 7, seed=r), 0),
}

strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
group = strategy.extended.replica_group
rid = group.replica_id
seen = {}
for name, (make, axis) in CASES.items():
    got = group.all_gather(make(rid), axis)
    want = torch.cat([make(0), make(1)], axis)
    seen[name] = {"dtype": str(got.dtype), "shape": list(got.shape),
                  "equal": got.dtype == want.dtype and got.shape == want.shape
                  and bool(torch.equal(got, want))}
Path(sys.argv[1], f"replica{rid}.json").write_text(json.dumps(seen))
