"""Every replica's ``predict`` outputs on every replica, as tensors (nothing pickled).

Each replica holds one output nest per step.  :func:`gather_outputs` checks that the
replicas' nests agree (structure, dtypes, shapes but the batch axis), sends one small
tensor of row counts and each output leaf as one padded all-gather, and returns the
per-step outputs of all replicas ordered as the global batches were: step by step,
and within a step by each replica's place in the global batch (``order_key``).

Example (two replicas, one step each; replica 0 predicted rows ``[[1.]]``, replica 1
rows ``[[2.], [3.]]``)::

    gather_outputs(group, order_key, [np.array([[1.]])])
    # on both: [array([[1.]]), array([[2.], [3.]])]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distrib import nest
from distrib.distribute.group import ReplicaGroupInfo

__all__ = ["gather_outputs"]


def _rows(leaf: np.ndarray) -> int:
    return int(leaf.shape[0]) if leaf.ndim else 1


def _local_leaf(steps: list[list[np.ndarray]], k: int) -> torch.Tensor:
    parts = [torch.as_tensor(np.ascontiguousarray(s[k])).reshape(_rows(s[k]), *s[k].shape[1:])
             for s in steps]
    return torch.cat(parts)


def gather_outputs(group: ReplicaGroupInfo, order_key: int, outputs: list[Any]) -> list[Any]:
    """All replicas' per-step output nests, in global row order (see the module docstring)."""
    group.check_signature("predict outputs", outputs, (0,))
    replicas = group.num_replicas_in_sync
    steps = [[np.asarray(x) for x in nest.flatten(o)] for o in outputs]
    spec = nest.tree_flatten(outputs[0])[1]
    n_leaves = len(steps[0])
    counts = [_rows(leaf) for s in steps for leaf in s]          # step-major, leaf-minor
    meta = group.all_gather(torch.tensor([[order_key, *counts]], dtype=torch.int64), 0)
    keys = meta[:, 0].tolist()
    per_replica_counts = meta[:, 1:].reshape(replicas, len(steps), n_leaves)
    pieces: list[list[list[np.ndarray]]] = []                     # [leaf][replica][step]
    for k in range(n_leaves):
        local = _local_leaf(steps, k)
        like = steps[0][k]
        flat = group.all_gather(local.view(torch.uint8) if local.dtype == torch.bool else local, 0)
        flat = flat.view(torch.bool) if local.dtype == torch.bool else flat
        by_replica = torch.split(flat, per_replica_counts[:, :, k].sum(dim=1).tolist())
        pieces.append([[p.reshape(-1, *like.shape[1:]).numpy() if like.ndim
                        else p.reshape(()).numpy()
                        for p in torch.split(rows, per_replica_counts[r, :, k].tolist())]
                       for r, rows in enumerate(by_replica)])
    order = sorted(range(replicas), key=lambda r: keys[r])
    return [nest.tree_unflatten(spec, [pieces[k][r][s] for k in range(n_leaves)])
            for s in range(len(steps)) for r in order]
