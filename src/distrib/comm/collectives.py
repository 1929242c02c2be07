"""The typed collectives of distrib: the only code that calls torch.distributed collectives.

All functions take a :class:`~distrib.comm.group.Communicator` and are no-ops
(returning their input) in a group of one.  Nested values (lists, tuples, dicts
of tensors and Python numbers) are packed so that one collective carries them
all.  :func:`all_reduce` and :func:`all_gather` are differentiable: the gradient
of an all-reduce is the same all-reduce of the upstream gradients, and the
gradient of an all-gather is the SUM all-reduce of the upstream gradient,
sliced back to this replica's rows (TF's rule).

Only tensors travel: nothing received from a peer is ever unpickled.  The
user-facing reductions and gathers first run :func:`check_same_signature` (one
small collective of one integer per replica), so values whose structure, shapes
or dtypes differ between replicas raise an error naming the replicas and the
difference instead of reaching the engine.

Example (two replicas; replica ``i`` passes ``torch.tensor([i + 1.0])``)::

    all_reduce(comm, ReduceOp.SUM, x)           # both get tensor([3.])
    all_gather(comm, torch.tensor([1, 2, 3]), 0) # both get tensor([1, 2, 3, 1, 2, 3])
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from distrib.comm.group import Communicator
from distrib.comm.ops import ReduceOp
from distrib.errors import UsageError, explain
from distrib.nest import tree_flatten, tree_unflatten

__all__ = ["all_reduce", "all_reduce_nest", "all_gather", "barrier", "check_same_signature",
           "signature_of", "reduce_to_chief", "broadcast_", "sum_gradient_bucket"]


def _raw_all_reduce(comm: Communicator, t: torch.Tensor, what: str = "all_reduce") -> torch.Tensor:
    t = t.contiguous().clone()
    with comm.guard(what):
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=comm.group)
    return t


def sum_gradient_bucket(group: Any, bucket: dist.GradBucket
                        ) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: SUM one gradient bucket over ``group``, asynchronously.

    DDP's own hook averages; distrib sums because the loss is already scaled by the
    global batch size (TensorFlow's rule).

    Example::

        torch_adapter.register_comm_hook(ddp, group, sum_gradient_bucket)
    """
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    assert work is not None
    fut: torch.futures.Future[torch.Tensor] = work.get_future().then(lambda f: f.value()[0])
    return fut


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


# A gather whose every part fits in this many bytes takes one collective: each replica
# sends its row count and its rows in one fixed-size buffer.  Larger parts take a second
# collective, sized by the longest part (the counts came with the first).
_INLINE_BYTES = 1024


def _gather_inline(comm: Communicator, moved: torch.Tensor) -> tuple[list[int],
                                                                     list[torch.Tensor] | None]:
    """Every replica's row count, and every replica's rows where all of them fit inline.

    Each replica sends 16 bytes of header (its row count, then padding that keeps the
    rows aligned for any dtype) and up to ``_INLINE_BYTES`` of rows.  Every replica sees
    every count, so all of them take the same path.
    """
    row_bytes = math.prod(moved.shape[1:]) * moved.element_size()
    data = moved.reshape(-1).view(torch.uint8)
    buf = torch.zeros(16 + _INLINE_BYTES, dtype=torch.uint8, device=moved.device)
    buf[:8] = torch.tensor([moved.shape[0]], dtype=torch.int64,
                           device=moved.device).view(torch.uint8)
    if data.numel() <= _INLINE_BYTES:
        buf[16:16 + data.numel()] = data
    parts = [torch.empty_like(buf) for _ in range(comm.world_size)]
    with comm.guard("all_gather"):
        dist.all_gather(parts, buf, group=comm.group)
    sizes: list[int] = torch.stack([p[:8] for p in parts]).view(torch.int64).flatten().tolist()
    if max(sizes) * row_bytes > _INLINE_BYTES:
        return sizes, None
    return sizes, [p[16:16 + n * row_bytes].view(moved.dtype).view(n, *moved.shape[1:])
                   for p, n in zip(parts, sizes)]


def _raw_all_gather(comm: Communicator, t: torch.Tensor, axis: int) -> tuple[torch.Tensor,
                                                                              list[int]]:
    moved = t.movedim(axis, 0).contiguous()
    sizes, inline = _gather_inline(comm, moved)
    if inline is not None:
        return torch.cat(inline).movedim(0, axis), sizes
    longest = max(sizes)
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


def reduce_to_chief(comm: Communicator, t: torch.Tensor) -> torch.Tensor:
    """SUM of ``t`` over all replicas, on replica 0 (in place; other replicas' ``t`` is undefined).

    Example (two replicas passing ``torch.tensor([1.])`` and ``torch.tensor([2.])``)::

        reduce_to_chief(comm, t)      # replica 0: tensor([3.])
    """
    if comm.world_size == 1:
        return t
    with comm.guard("reduce to the chief"):
        dist.reduce(t, dst=0, op=dist.ReduceOp.SUM, group=comm.group)
    return t


def broadcast_(comm: Communicator, t: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``t`` on every replica with replica ``src``'s (in place).

    Example (two replicas)::

        broadcast_(comm, t)           # every replica: replica 0's t
    """
    if comm.world_size == 1:
        return t
    with comm.guard("broadcast"):
        dist.broadcast(t, src=src, group=comm.group)
    return t


def barrier(comm: Communicator, what: str = "barrier") -> None:
    """Wait until every replica arrives (bounded by the communicator's timeout)."""
    if comm.world_size == 1:
        return
    _raw_all_reduce(comm, torch.zeros(1), what)


# ------------------------------------------------------------ signature check
_NUMBERS = (bool, int, float, complex, np.ndarray, np.generic)
_SEP = "\x1f"


class _Text(str):
    def __repr__(self) -> str:
        return str(self)


def _describe_leaf(x: Any, free_axes: Sequence[int]) -> str:
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, _NUMBERS):
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):  # strings, objects
            return f"<{type(x).__name__} of {getattr(x, 'dtype', '?')}>"
    else:
        return "None" if x is None else f"<{type(x).__name__}>"
    free = {a % t.dim() for a in free_axes if -t.dim() <= a < t.dim()} if t.dim() else set()
    dims = ",".join("*" if i in free else str(n) for i, n in enumerate(t.shape))
    return f"{str(t.dtype).removeprefix('torch.')}[{dims}]"


def signature_of(value: Any, free_axes: Sequence[int] = ()) -> tuple[str, str]:
    """``(canonical, shown)``: a nest's structure, leaf dtypes and shapes as text.

    Dimensions listed in ``free_axes`` may differ between replicas (shown as ``*``).

    Example:
        >>> signature_of({"b": torch.zeros(2, 3), "a": 1.0}, free_axes=(0,))[1]
        "{'b': float32[*,3], 'a': float32[]}"
    """
    leaves, spec = tree_flatten(value)
    descs = [_describe_leaf(x, free_axes) for x in leaves]
    shown = str(spec.unflatten([_Text(d) for d in descs]))
    return f"{spec!r}{_SEP}{_SEP.join(descs)}", shown


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little",
                          signed=True)


def _gather_texts(comm: Communicator, text: str) -> list[str]:
    data = torch.tensor(list(text.encode()), dtype=torch.uint8)
    joined, sizes = _raw_all_gather(comm, data, 0)
    parts, pos = [], 0
    for n in sizes:
        parts.append(bytes(joined[pos:pos + n].tolist()).decode(errors="replace"))
        pos += n
    return parts


def _difference(a: str, b: str) -> str:
    spec_a, *leaves_a = a.split(_SEP)
    spec_b, *leaves_b = b.split(_SEP)
    if spec_a != spec_b:
        return "the structures differ"
    for i, (x, y) in enumerate(zip(leaves_a, leaves_b)):
        if x != y:
            what = "dtype" if x.split("[")[0] != y.split("[")[0] else "shape"
            return f"the {what} of leaf {i} differs ({x} vs {y})"
    return "the values differ"


def _mismatch(what: str, canon: list[str], shown: list[str]) -> UsageError:
    groups: dict[str, list[int]] = {}
    for r, c in enumerate(canon):
        groups.setdefault(c, []).append(r)
    first, second = list(groups)[:2]
    parts = [f"replica{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: "
             f"{shown[rs[0]]}" for rs in groups.values()]
    return UsageError(explain(
        f"{what} value", "; ".join(parts),
        "every replica must pass values of the same structure, shapes and dtypes, but "
        f"{_difference(first, second)} between replica {groups[first][0]} and replica "
        f"{groups[second][0]}",
        "return the same structure, with the same dtypes and shapes, from the replica "
        "function on every replica (pad values whose size varies, or gather them along "
        "the axis that varies)"))


def _unmatched_calls(calls: list[str]) -> UsageError:
    shown = "; ".join(f"replica {r}: {call}" for r, call in enumerate(calls))
    return UsageError(explain(
        "collective calls", shown, "every replica must make the same collective calls in "
        "the same order, but the replicas are in different calls (one replica made a call "
        "the others skipped); no value was exchanged",
        "make the call on every replica: do not put all_reduce, all_gather, reduce or "
        "gather under a condition that differs between replicas (such as "
        "replica_id_in_sync_group)"))


def _leaf_text(x: Any) -> str:
    text = repr(x)
    return f"{type(x).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _check_leaves(what: str, value: Any, shown: str) -> None:
    leaves, _ = tree_flatten(value)
    for i, x in enumerate(leaves):
        if not isinstance(x, (torch.Tensor, *_NUMBERS)) or _describe_leaf(x, ()).startswith("<"):
            whole = x is None and len(leaves) == 1
            raise UsageError(explain(
                f"{what} value", None if whole else shown,
                "the replica function returned None" if whole else
                f"leaf {i} is {'None' if x is None else _leaf_text(x)}, and only tensors "
                "and numbers can be reduced or gathered",
                "return the tensor (or a structure of tensors) from the function given to "
                "strategy.run, e.g. `return loss`"))


def _check_axes(value: Any, axes: Sequence[int]) -> None:
    for t in tree_flatten(value)[0]:
        rank = torch.as_tensor(t).dim() if not isinstance(t, torch.Tensor) else t.dim()
        bad = [a for a in axes if not -rank <= a < max(rank, 1)]
        if bad:  # TensorFlow's words
            raise UsageError(f"`axis` = {bad[0]!r} out of range for `value` with rank {rank}. "
                             f"Fix: pass an axis in [-{rank}, {rank}).")


def check_same_signature(comm: Communicator | None, what: str, value: Any,
                         free_axes: Sequence[int] = ()) -> None:
    """Raise unless every replica passes a nest of the same structure, dtypes and shapes.

    Runs one small collective (one integer per replica) and, only when the values
    differ, a second one that carries each replica's description for the message.
    Every replica raises the same error.  Leaves must be tensors or numbers.

    Example (two replicas: replica 0 passes ``{"a": x}``, replica 1 ``{"b": x}``)::

        check_same_signature(comm, "strategy.reduce", value)
        # UsageError on both: ... replica 0: {'a': float32[2]}; replica 1: {'b': float32[2]}
    """
    for axis in free_axes:
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise UsageError(explain("axis", axis, "must be an int (or, for reduce, a tuple "
                                     "of ints or None)", "pass e.g. axis=0"))
    canonical, shown = signature_of(value, free_axes)
    if comm is not None and comm.world_size > 1:
        # The call's name is part of what is compared: a collective that only some
        # replicas make meets another call on the others, and both must raise here.
        mine = torch.tensor([_hash64(f"{what}{_SEP}{canonical}")], dtype=torch.int64)
        hashes = [torch.zeros(1, dtype=torch.int64) for _ in range(comm.world_size)]
        with comm.guard(f"{what} (signature check)"):
            dist.all_gather(hashes, mine, group=comm.group)
        if len({int(h.item()) for h in hashes}) > 1:
            texts = [t.split("\x00", 2)
                     for t in _gather_texts(comm, f"{what}\x00{canonical}\x00{shown}")]
            if len({w for w, _, _ in texts}) > 1:
                raise _unmatched_calls([w for w, _, _ in texts])
            raise _mismatch(what, [c for _, c, _ in texts], [s for _, _, s in texts])
    _check_leaves(what, value, shown)
    _check_axes(value, free_axes)
