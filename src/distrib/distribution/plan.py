"""How a ``LayoutMap`` becomes torch tensor parallelism: the sharding plan of a distribution.

For each parameter path the ``LayoutMap`` gives a ``TensorLayout`` (or none: replicated).
A ``Linear`` whose weight is split on its output dimension becomes torch's
``ColwiseParallel``, on its input dimension ``RowwiseParallel`` (``parallelize_module``).
A Linear split otherwise (a row-parallel weight with a split bias, say) gets DTensor
parameters with ``Shard``/``Replicate`` placements (``distribute_module``); it computes on
DTensors and hands back full tensors.  Parameters of other layers stay unsplit: torch's
DTensor computes some of them wrongly (a ``Conv2d`` split by output channels returns one
process's channels as if they were all), so a layout on them raises.
Column-parallel outputs are gathered and row-parallel inputs taken from the full
activation, so a layer's neighbours never see a split tensor (one all-gather more per
column/row pair than a hand-fused plan, correct whatever the forward does with them).

The processes of one batch coordinate (the model axes) compute on the same rows: the
root module gathers their slices of the batch before its forward and hands each process
its own rows of the outputs after it (their gradients gathered back in the backward).
Every process thus keeps its own rows for the loss and the metrics, as under a
data-parallel strategy, and the gradients of the shards are those of the whole batch.

Example::

    plan = LayoutPlan(mesh, "batch", layout_map, strict=False)
    plan.apply(module, torch_mesh)     # what the distribution's strategy does at set-up
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from distrib.distribution.layout_map import LayoutMap
from distrib.distribution.mesh import DeviceMesh, TensorLayout
from distrib.errors import UsageError, explain
from distrib.nest import map_structure

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh as TorchMesh

__all__ = ["LayoutPlan", "placements_of"]


def placements_of(layout: TensorLayout, mesh: DeviceMesh) -> list[Any]:
    """DTensor placements (one per mesh axis) of ``layout``: ``Shard(dim)`` on the axis a
    dimension is split over, ``Replicate()`` on the others."""
    from torch.distributed.tensor import Replicate, Shard
    out: list[Any] = [Replicate() for _ in mesh.axis_names]
    for dim, axis in enumerate(layout.axes):
        if axis is not None:
            out[mesh.axis_names.index(axis)] = Shard(dim)
    return out


@dataclass
class LayoutPlan:
    """The ``ShardingPlan`` of ``DataParallel`` and ``ModelParallel``.

    Args:
        mesh: the distribution's mesh.
        batch_axis: the mesh axis the batch is split over.
        layout_map: the parameter layouts (None: every parameter replicated).
        strict: every trainable parameter must match a key, and every key a parameter.
    """

    mesh: DeviceMesh
    batch_axis: str
    layout_map: LayoutMap | None = None
    strict: bool = False
    sum_gradients_over: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.mesh.axis_size(self.batch_axis)  # raises for an axis the mesh does not have
        self.sum_gradients_over = self.batch_axis

    # ------------------------------------------------------------- layouts
    def layouts(self, module: nn.Module) -> dict[str, TensorLayout]:
        """The split parameters of ``module`` and their layouts (teaching errors on bad ones)."""
        out: dict[str, TensorLayout] = {}
        unmatched: list[str] = []
        used: set[str] = set()
        lm = self.layout_map
        for path, p in module.named_parameters():
            layout = lm[path] if lm is not None else None
            if layout is None:
                if p.requires_grad:
                    unmatched.append(path)
                continue
            if lm is not None:
                used.update(lm.matching_keys(path))
            layout.check_shape(p.shape, f"parameter {path!r}")
            named = [a for a in layout.axes if a is not None]
            if self.batch_axis in named:
                raise UsageError(explain(
                    f"layout of parameter {path!r}", layout.axes, f"splits a weight over the "
                    f"batch axis {self.batch_axis!r}; distrib splits weights over model axes "
                    "only", "use a model axis, or distrib.experimental.ShardedStrategy to "
                    "shard weights over the data"))
            if any(self.mesh.axis_size(a) > 1 for a in named):
                out[path] = layout
        if self.strict and lm is not None:
            if unmatched:
                raise UsageError(explain(
                    "parameters without a layout", unmatched[:5], "strict matching: every "
                    "trainable parameter path must match a LayoutMap key",
                    "add keys for them (e.g. layout_map['.*bias'] = (None,)), or pass "
                    "strict=False to replicate the unmatched ones"))
            unused = [k for k in lm if k not in used]
            if unused:
                raise UsageError(explain(
                    "LayoutMap keys", unused, "strict matching: these keys match no "
                    "parameter path of the model (paths look like "
                    f"{[n for n, _ in module.named_parameters()][:3]})",
                    "fix or remove the keys"))
        return out

    # --------------------------------------------------------------- apply
    def apply(self, module: nn.Module, mesh: TorchMesh) -> None:
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )
        from torch.distributed.tensor.placement_types import Replicate

        layouts = self.layouts(module)
        styles: dict[str, dict[str, Any]] = {}
        generic: dict[str, dict[str, TensorLayout]] = {}
        for name, sub in module.named_modules():
            prefix = f"{name}." if name else ""
            mine = {k[len(prefix):]: v for k, v in layouts.items()
                    if k.startswith(prefix) and "." not in k[len(prefix):]}
            if not mine:
                continue
            if not isinstance(sub, nn.Linear):
                raise UsageError(explain(
                    f"layouts of {type(sub).__name__} parameters {name!r}",
                    {k: v.axes for k, v in mine.items()}, "distrib splits the parameters "
                    "of Linear layers only (torch's DTensor computes other layers' split "
                    "parameters wrongly or not at all, e.g. a Conv2d split by output "
                    "channels)", "leave this layer's parameters unsplit (None), or shard "
                    "it over the data with distrib.ShardedStrategy"))
            style = _linear_style(sub, mine)
            if style is not None:
                axis, colwise = style
                styles.setdefault(axis, {})[name] = (
                    ColwiseParallel(output_layouts=Replicate()) if colwise
                    else RowwiseParallel(input_layouts=Replicate()))
            else:
                generic[name] = mine
        for axis, plan in styles.items():
            parallelize_module(module, mesh[axis], plan)
        for name, mine in generic.items():
            _distribute_generic(module.get_submodule(name), mine, self.mesh, mesh)
        group = _batch_peers(mesh, self.mesh, self.batch_axis)
        if group is not None:
            _install_boundary(module, group)


def _linear_style(sub: nn.Module, mine: dict[str, TensorLayout]) -> tuple[str, bool] | None:
    """(axis, column?) when ``sub`` is a Linear whose layouts are torch's column or row style."""
    if not isinstance(sub, nn.Linear) or "weight" not in mine:
        return None
    axes = mine["weight"].axes
    bias = mine["bias"].axes if "bias" in mine else None
    if axes[0] is not None and axes[1] is None and bias in (None, (axes[0],)):
        return axes[0], True
    if axes[0] is None and axes[1] is not None and bias is None:
        return axes[1], False
    return None


def _distribute_generic(sub: nn.Module, mine: dict[str, TensorLayout], spec: DeviceMesh,
                        mesh: TorchMesh) -> None:
    """DTensor parameters with ``Shard``/``Replicate`` placements; full tensors in and out."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module, distribute_tensor

    def partition(name: str, m: nn.Module, device_mesh: TorchMesh) -> None:
        if m is not sub:
            return
        for pname, p in list(m.named_parameters(recurse=False)):
            layout = mine.get(pname)
            placements = placements_of(layout, spec) if layout is not None \
                else [Replicate() for _ in spec.axis_names]
            m.register_parameter(pname, nn.Parameter(
                distribute_tensor(p.data, device_mesh, placements),
                requires_grad=p.requires_grad))

    def inputs(m: nn.Module, args: Any, device_mesh: TorchMesh) -> Any:
        return map_structure(lambda x: DTensor.from_local(
            x, device_mesh, [Replicate() for _ in spec.axis_names], run_check=False)
            if isinstance(x, torch.Tensor) and not isinstance(x, DTensor) else x, args)

    def outputs(m: nn.Module, out: Any, device_mesh: TorchMesh) -> Any:
        def full(x: Any) -> Any:
            if isinstance(x, DTensor):
                return x.full_tensor()
            if isinstance(x, torch.Tensor):  # DTensor computed a part and dropped its layout
                raise UsageError(explain(
                    f"layouts of {type(m).__name__} parameters",
                    {k: v.axes for k, v in mine.items()}, "torch's DTensor has no sharding "
                    f"rule that computes this {type(m).__name__} with its parameters split "
                    "so (it returned one process's part as a plain tensor)",
                    "split only Linear weights (column or row parallel) and leave this "
                    "layer's parameters unsplit (None), or shard it over the data with "
                    "distrib.ShardedStrategy"))
            return x
        return map_structure(full, out)

    distribute_module(sub, mesh, partition, inputs, outputs)


def _batch_peers(mesh: TorchMesh, spec: DeviceMesh, batch_axis: str) -> Any:
    """The process group of this process's batch coordinate (None when it is alone)."""
    if spec.size == spec.axis_size(batch_axis):
        return None
    ranks = mesh.mesh
    dim = spec.axis_names.index(batch_axis)
    me = dist.get_rank()
    mine = None
    for b in range(ranks.shape[dim]):
        members = [int(r) for r in ranks.select(dim, b).flatten().tolist()]
        group = dist.new_group(members)  # every process creates every group, in order
        if me in members:
            mine = group
    return mine


class _Rows(torch.autograd.Function):
    """This process's rows of an output computed on its batch peers' rows; the backward
    gathers every peer's gradient rows (the output's gradient on the whole batch)."""

    @staticmethod
    def forward(ctx: Any, full: torch.Tensor, lo: int, sizes: list[int],
                group: Any) -> torch.Tensor:
        ctx.sizes, ctx.group = sizes, group
        rank = dist.get_rank(group)
        return full[lo:lo + sizes[rank]].clone()

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        return _gather_rows(grads[0].contiguous(), ctx.group, ctx.sizes), None, None, None


def _gather_rows(t: torch.Tensor, group: Any, sizes: Sequence[int]) -> torch.Tensor:
    top = max(sizes)
    padded = t.new_zeros((top, *t.shape[1:]))
    padded[:t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


class _Boundary:
    """Gathers the batch peers' rows before the root's forward; slices after it."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.calls: list[tuple[int, list[int]]] = []

    def _rows(self, args: Any) -> int | None:
        for x in _tensors(args):
            if x.dim() >= 1:
                return int(x.shape[0])
        return None

    def before(self, module: nn.Module, args: Any, kwargs: Any) -> Any:
        n = self._rows((args, kwargs))
        if n is None:
            self.calls.append((-1, []))
            return None
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(
            self.group))]
        dist.all_gather(counts, torch.tensor([n], dtype=torch.int64), group=self.group)
        sizes = [int(c.item()) for c in counts]
        rank = dist.get_rank(self.group)
        self.calls.append((sum(sizes[:rank]), sizes))

        def gather(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == n:
                return _gather_rows(x.detach(), self.group, sizes)
            return x
        return map_structure(gather, args), map_structure(gather, kwargs)

    def after(self, module: nn.Module, args: Any, kwargs: Any, out: Any) -> Any:
        lo, sizes = self.calls.pop()
        if not sizes:
            return out
        total = sum(sizes)

        def take(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == total:
                return _Rows.apply(x, lo, sizes, self.group)  # type: ignore[no-untyped-call]
            return x
        return map_structure(take, out)


def _tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_structure(lambda x: found.append(x) if isinstance(x, torch.Tensor) else None, value)
    return found


def _install_boundary(module: nn.Module, group: Any) -> None:
    boundary = _Boundary(group)
    module.register_forward_pre_hook(boundary.before, with_kwargs=True)
    module.register_forward_hook(boundary.after, with_kwargs=True)
