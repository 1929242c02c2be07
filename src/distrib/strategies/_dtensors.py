"""DTensor helpers of the sharded strategies: meshes, meta-device modules, gradients.

A sharded parameter is a ``DTensor``: each replica holds its part (``to_local()``), its
shape is the whole parameter's.  FSDP sums the gradients that ``backward()`` produces in
the backward itself (a reduce-scatter); :func:`sum_into_shards` sums the others — a
whole-parameter gradient set by hand — when the optimizer steps.

Example (two replicas, ``p`` a ``(4, 3)`` parameter sharded by rows)::

    p.grad = torch.ones(4, 3)                  # this replica's whole gradient
    sum_into_shards([(p, None)])               # p.grad: the sum's 2 rows of this replica
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from distrib.errors import UsageError, explain
from distrib.strategies._replication import lazy_parts

__all__ = ["refuse_lazy", "torch_errors_explained", "check_mesh_size", "on_meta", "reset_parameters", "lookup", "local", "full",
           "sum_gradients_in_fsdp", "sum_into_shards", "is_dtensor", "explain_torch_error"]


def check_mesh_size(shape: tuple[int, ...], names: tuple[str, ...], world: int) -> None:
    size = 1
    for n in shape:
        size *= int(n)
    if size != world or len(shape) != len(names):
        raise UsageError(explain(
            "mesh shape", dict(zip(names, shape)),
            f"a mesh names each axis once and holds every replica once: {size} places "
            f"for {world} replicas", f"give axes whose sizes multiply to {world}, e.g. "
            f"shape=({world},) or (1, {world})"))


def on_meta(module: nn.Module) -> bool:
    return any(t.is_meta for t in [*module.parameters(), *module.buffers()])


def reset_parameters(module: nn.Module) -> None:
    """The default ``param_init``: every submodule's own ``reset_parameters()``, as torch
    calls it when the module is created on a real device."""
    for m in module.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()


def lookup(table: WeakIdKeyDictionary, key: torch.Tensor) -> Any:
    return table.get(key)  # type: ignore[no-untyped-call]


def is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(t, DTensor)


def local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t  # DTensor: this replica's part


def full(value: Any) -> Any:
    full_tensor = getattr(value, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else value  # DTensor: gathered


def sum_gradients_in_fsdp(module: Any) -> None:
    """Have an FSDP module SUM its reduce-scattered gradients (TF's contract), with a plain
    SUM reduction (gloo has neither AVG nor PREMUL_SUM, which FSDP picks for float32)."""
    setter = getattr(module, "set_gradient_divide_factor", None)  # torch >= 2.8
    if setter is None:
        setter = module.set_reduce_scatter_divide_factor
    setter(1.0)
    force_sum = getattr(module, "set_force_sum_reduction_for_comms", None)
    if force_sum is not None:
        force_sum(True)


def sum_into_shards(todo: list[tuple[torch.Tensor, Any]]) -> None:
    """Replace the whole-parameter gradient of each DTensor parameter by its SUM over the
    replicas, kept as the parameter's own part (a DTensor of its placements).

    ``todo`` pairs each parameter with the process group its gradients are summed over
    (None: the parameter's own mesh, FSDP's batch axis).  One flat all-reduce per group
    and dtype, in the order given (the same on every replica).

    (torch refuses a gradient of another shape when it is assigned.)

    Raises:
        UsageError: a parameter sharded over several mesh axes whose gradients the plan
            does not say how to sum.
    """
    from torch.distributed.tensor import DTensor, Replicate

    batches: dict[tuple[int, torch.dtype], tuple[Any, list[torch.Tensor]]] = {}
    for p, group in todo:
        if group is None:
            mesh = p.device_mesh  # type: ignore[attr-defined]
            if mesh.ndim != 1:
                raise UsageError(explain(
                    "a gradient set on a parameter sharded over a mesh of shape",
                    tuple(mesh.shape), "only gradients of parameters sharded over one "
                    "axis are summed at the optimizer step", "compute the gradients with "
                    "loss.backward()"))
            group = mesh.get_group()
        key = (id(group), p.dtype)
        batches.setdefault(key, (group, []))[1].append(p)
    with torch.no_grad():
        for group, params in batches.values():
            flat = torch.cat([p.grad.detach().reshape(-1)  # type: ignore[union-attr]
                              for p in params])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
            pos = 0
            for p in params:
                n = p.numel()
                mesh = p.device_mesh  # type: ignore[attr-defined]
                whole = DTensor.from_local(flat[pos:pos + n].view(p.shape).to(p.device),
                                           mesh, [Replicate()] * mesh.ndim, run_check=False)
                p.grad = whole.redistribute(mesh, p.placements)  # type: ignore[attr-defined]
                pos += n


#: torch's message when ``torch.autograd.grad`` is asked for a tensor outside the graph.
_NOT_IN_GRAPH = "appears to not have been used in the graph"
#: FSDP's error when a module's parameters were swapped for plain tensors (functional_call).
_NOT_SHARDED = "object has no attribute '_local_tensor'"


@contextlib.contextmanager
def torch_errors_explained(active: bool) -> Iterator[None]:
    """Raise :func:`explain_torch_error`'s error instead of torch's where it has one
    (``active``: some module is sharded)."""
    try:
        yield
    except (RuntimeError, AttributeError) as exc:
        if (error := explain_torch_error(exc) if active else None) is None:
            raise
        raise error from exc


def explain_torch_error(exc: BaseException) -> UsageError | None:
    """The error to raise instead of ``exc`` when torch failed because a gradient route
    needs the parameters themselves in the graph, which a sharded module's are not
    (None for any other error)."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and _NOT_IN_GRAPH in text:
        what = "torch.autograd.grad(loss, parameters)"
        why = ("each forward gathers a sharded parameter into a whole tensor outside "
               "autograd (torch's FSDP), so the parameter itself is not in the loss's graph "
               "and has no gradient there")
    elif isinstance(exc, AttributeError) and _NOT_SHARDED in text:
        what = "torch.func.functional_call(module, tensors, ...)"
        why = ("torch's FSDP gathers a sharded module's own parameters (DTensors) for each "
               "forward and cannot run it on other tensors (torch.func transforms)")
    else:
        return None
    return UsageError(explain(
        what, "the parameters of a ShardedStrategy module",
        f"{why} (torch: {text.split('. ')[0]})",
        "call loss.backward() (the gradients are summed over the replicas and sharded "
        "in the backward), or compute each parameter's whole gradient another way "
        "(from p.full_tensor()) and assign it to p.grad: optimizer.step() sums it over "
        "the replicas and keeps this replica's shard"))


def refuse_lazy(module: nn.Module) -> None:
    """Raise the fix when ``module`` holds lazy parameters (``nn.LazyLinear``): a sharded
    strategy shards every parameter at set-up, before a lazy one has a shape."""
    lazy = lazy_parts(module)
    if lazy:
        raise UsageError(explain(
            "a module set up under ShardedStrategy", type(lazy[0]).__name__,
            "ShardedStrategy shards every parameter when the module is set up, and a "
            "lazy module's parameters have no shape until its first forward pass",
            "give the layer its input size (nn.Linear(in_features, out) instead of "
            "nn.LazyLinear(out)), or create its parameters first: call it once on a "
            "sample batch (net(x)) before wrapping it in distrib.Model(net) under "
            "strategy.scope()"))
