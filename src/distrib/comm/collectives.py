"""The typed collectives of distrib: the only code that calls torch.distributed collectives.

All functions take a :class:`~distrib.comm.group.Communicator` and are no-ops
(returning their input) in a group of one.  Nested values (lists, tuples, dicts
of tensors and Python numbers) are packed so that one collective carries them
all.  :func:`all_reduce` and :func:`all_gather` are differentiable: the gradient
of an all-reduce is the same all-reduce of the upstream gradients, and the
gradient of an all-gather is the SUM all-reduce of the upstream gradient,
sliced back to this replica's rows (TF's rule).

Example (two replicas; replica ``i`` passes ``torch.tensor([i + 1.0])``)::

    all_reduce(comm, ReduceOp.SUM, x)           # both get tensor([3.])
    all_gather(comm, torch.tensor([1, 2, 3]), 0) # both get tensor([1, 2, 3, 1, 2, 3])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distrib.comm.group import Communicator
from distrib.comm.ops import ReduceOp
from distrib.nest import tree_flatten, tree_unflatten

__all__ = ["all_reduce", "all_reduce_nest", "all_gather", "all_gather_object",
           "broadcast_object", "barrier"]


def _raw_all_reduce(comm: Communicator, t: torch.Tensor, what: str = "all_reduce") -> torch.Tensor:
    t = t.contiguous().clone()
    with comm.guard(what):
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=comm.group)
    return t


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, comm: Communicator, mean: bool, t: torch.Tensor) -> torch.Tensor:
        ctx.comm, ctx.mean = comm, mean
        out = _raw_all_reduce(comm, t)
        return out / comm.world_size if mean else out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        out = _raw_all_reduce(ctx.comm, grad, "all_reduce (backward)")
        return None, None, (out / ctx.comm.world_size if ctx.mean else out)


def all_reduce(comm: Communicator, op: ReduceOp, t: torch.Tensor) -> torch.Tensor:
    """SUM or MEAN of ``t`` over all replicas (differentiable; returns a new tensor)."""
    if comm.world_size == 1:
        return t
    if t.requires_grad and torch.is_grad_enabled():
        result: torch.Tensor = _AllReduce.apply(comm, op is ReduceOp.MEAN, t)  # type: ignore[no-untyped-call]
        return result
    out = _raw_all_reduce(comm, t)
    return out / comm.world_size if op is ReduceOp.MEAN else out


def all_reduce_nest(comm: Communicator, op: ReduceOp, value: Any) -> Any:
    """All-reduce every leaf of a nest; non-differentiable leaves share one packed collective.

    Python numbers come back as 0-d tensors.
    """
    leaves, spec = tree_flatten(value)
    tensors = [x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in leaves]
    out: list[Any] = list(tensors)
    packable: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, t in enumerate(tensors):
        if t.requires_grad and torch.is_grad_enabled():
            out[i] = all_reduce(comm, op, t)
        else:
            packable.setdefault((t.dtype, t.device), []).append(i)
    for idx in packable.values():
        flat = torch.cat([tensors[i].reshape(-1) for i in idx])
        red = all_reduce(comm, op, flat)
        pos = 0
        for i in idx:
            n = tensors[i].numel()
            out[i] = red[pos:pos + n].view(tensors[i].shape)
            pos += n
    return tree_unflatten(spec, out)


def _gather_sizes(comm: Communicator, size: int) -> list[int]:
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(comm.world_size)]
    with comm.guard("all_gather (sizes)"):
        dist.all_gather(sizes, torch.tensor([size], dtype=torch.int64), group=comm.group)
    return [int(s.item()) for s in sizes]


def _raw_all_gather(comm: Communicator, t: torch.Tensor, axis: int) -> tuple[torch.Tensor,
                                                                              list[int]]:
    sizes = _gather_sizes(comm, t.shape[axis])
    longest = max(sizes)
    moved = t.movedim(axis, 0).contiguous()
    if moved.shape[0] < longest:
        pad = torch.zeros((longest - moved.shape[0], *moved.shape[1:]), dtype=t.dtype,
                          device=t.device)
        moved = torch.cat([moved, pad])
    parts = [torch.empty_like(moved) for _ in range(comm.world_size)]
    with comm.guard("all_gather"):
        dist.all_gather(parts, moved, group=comm.group)
    joined = torch.cat([p[:n] for p, n in zip(parts, sizes)])
    return joined.movedim(0, axis), sizes


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, comm: Communicator, axis: int, t: torch.Tensor) -> torch.Tensor:
        out, sizes = _raw_all_gather(comm, t, axis)
        ctx.comm, ctx.axis, ctx.sizes = comm, axis, sizes
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        total = _raw_all_reduce(ctx.comm, grad, "all_gather (backward)")
        start = sum(ctx.sizes[: ctx.comm.rank])
        return None, None, total.narrow(ctx.axis, start, ctx.sizes[ctx.comm.rank])


def all_gather(comm: Communicator, t: torch.Tensor, axis: int) -> torch.Tensor:
    """Concatenate every replica's ``t`` along ``axis``, in replica order (sizes on ``axis`` may differ)."""
    if comm.world_size == 1:
        return t
    axis = axis % t.dim()
    if t.requires_grad and torch.is_grad_enabled():
        result: torch.Tensor = _AllGather.apply(comm, axis, t)  # type: ignore[no-untyped-call]
        return result
    return _raw_all_gather(comm, t, axis)[0]


def all_gather_object(comm: Communicator, obj: Any) -> list[Any]:
    """One picklable object from every replica, in replica order."""
    if comm.world_size == 1:
        return [obj]
    out: list[Any] = [None] * comm.world_size
    with comm.guard("all_gather_object"):
        dist.all_gather_object(out, obj, group=comm.group)
    return out


def broadcast_object(comm: Communicator, obj: Any, src: int = 0) -> Any:
    """The object of replica ``src``, on every replica."""
    if comm.world_size == 1:
        return obj
    box = [obj]
    with comm.guard("broadcast"):
        dist.broadcast_object_list(box, src=src, group=comm.group)
    return box[0]


def barrier(comm: Communicator, what: str = "barrier") -> None:
    """Wait until every replica arrives (bounded by the communicator's timeout)."""
    if comm.world_size == 1:
        return
    _raw_all_reduce(comm, torch.zeros(1), what)
