"""Helpers for input-pipeline tests: real gloo groups, step collection, an oracle trainer.

Strategy-level tests can reuse them: ``collect_steps(strategy.experimental_distribute_dataset(ds))``
returns what this replica saw per step, ``global_steps`` joins the replicas'
views, and ``train_linear`` / ``oracle_linear`` give the oracle contract for a
linear least-squares model (float64) fed by any per-step batches.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import Any

import torch

from distrib.distribute.group import ReplicaGroupInfo

GLOBAL_BATCH = 8


class CountingCollectives:
    """SUM all-reduce (counted) and all-gather over the default torch.distributed group."""

    def __init__(self) -> None:
        self.calls = 0

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        self.calls += 1
        out = t.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def all_gather(self, t: torch.Tensor, axis: int) -> torch.Tensor:
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=axis)


def init_gloo(rank: int, world: int, init_file: str, timeout_s: float = 60.0) -> None:
    """Join a real gloo process group through a file store (no ports)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def group_for(rank: int, world: int, num_workers: int, coll: CountingCollectives,
              wrap: bool = False) -> ReplicaGroupInfo:
    """This rank's ``ReplicaGroupInfo`` with ``num_workers`` workers of equal size."""
    per_worker = world // num_workers
    return ReplicaGroupInfo(
        num_replicas_in_sync=world, replica_id=rank, num_workers=num_workers,
        worker_index=rank // per_worker, local_replicas=per_worker,
        local_replica_id=rank % per_worker, wrap_per_replica=wrap,
        all_reduce_sum=coll.all_reduce_sum, all_gather=coll.all_gather)


def fake_group(replicas: int, replica_id: int, num_workers: int) -> ReplicaGroupInfo:
    """A group view for pure-logic tests whose collectives must never be called."""
    def forbidden(*_: Any) -> Any:
        raise AssertionError("a collective was called where none is needed")

    per_worker = replicas // num_workers
    return ReplicaGroupInfo(
        num_replicas_in_sync=replicas, replica_id=replica_id, num_workers=num_workers,
        worker_index=replica_id // per_worker, local_replicas=per_worker,
        local_replica_id=replica_id % per_worker, all_reduce_sum=forbidden)


def as_lists(x: Any) -> Any:
    """Tensors (and nests of them) as plain lists, for comparisons and JSON."""
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, dict):
        return {k: as_lists(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [as_lists(v) for v in x]
    if hasattr(x, "values") and isinstance(getattr(x, "values", None), tuple):
        return as_lists(x.values[0])
    return x


def collect_steps(dist_dataset: Iterable[Any]) -> list[Any]:
    """Every batch this replica receives in one epoch, as lists."""
    return [as_lists(b) for b in dist_dataset]


def global_steps(per_replica: list[list[Any]]) -> list[list[Any]]:
    """Join the replicas' batches of each step (replica order) into the step's global batch."""
    steps = len(per_replica[0])
    assert all(len(r) == steps for r in per_replica), "replicas took different step counts"
    return [sum((r[s] for r in per_replica), []) for s in range(steps)]


def linear_data(n: int, features: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 regression problem with ``n`` rows."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    y = x @ torch.arange(1.0, features + 1, dtype=torch.float64) + 0.5
    return x, y


def train_linear(batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                 all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 global_batch: int = GLOBAL_BATCH, features: int = 3, lr: float = 0.1
                 ) -> torch.Tensor:
    """SGD on ``sum(per_example) / global_batch`` with gradients summed by ``all_reduce``."""
    w = torch.zeros(features + 1, dtype=torch.float64, requires_grad=True)
    for x, y in batches:
        pred = x @ w[:-1] + w[-1]
        loss = ((pred - y) ** 2).sum() / global_batch
        (grad,) = torch.autograd.grad(loss, w)
        if all_reduce is not None:
            grad = all_reduce(grad)
        with torch.no_grad():
            w -= lr * grad
    return w.detach()
