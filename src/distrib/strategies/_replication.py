"""Modules created inside ``strategy.scope()`` become replicated (TF's variable creator scope).

While the outermost scope of a multi-replica strategy is open, global
registration hooks record every module that gets parameters or submodules.
When that scope closes, the *root* modules (those not contained in another
recorded module) are moved to the replica's device and handed to torch's own
data-parallel machinery (the composable form of DDP, ``replicate``): parameters
and buffers are broadcast from the chief now, and from then on gradients are
all-reduced in buckets while the backward pass runs.  The reduction is a SUM,
TF's contract, not DDP's mean.

A module class can opt out of being a root — its children are replicated
instead — by setting ``_distrib_transparent = True`` (wrappers that call their
children directly).

Example::

    with strategy.scope():
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    # net's parameters are now identical on every replica.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules import module as module_mod

from distrib.comm import torch_adapter

__all__ = ["ModuleTracker", "mark_replicated", "replicate_module"]


class ModuleTracker:
    """Records the modules that gain parameters or submodules while it is active."""

    def __init__(self) -> None:
        self._seen: list[weakref.ref[nn.Module]] = []
        self._ids: set[int] = set()
        self._handles: list[Any] = []

    def _note(self, module: nn.Module, *_: Any) -> None:
        if id(module) not in self._ids:
            self._ids.add(id(module))
            self._seen.append(weakref.ref(module))

    def start(self) -> None:
        """Install the global registration hooks."""
        self._handles = [
            module_mod.register_module_parameter_registration_hook(self._note),
            module_mod.register_module_module_registration_hook(self._note),
            module_mod.register_module_buffer_registration_hook(self._note),
        ]

    def stop(self) -> list[nn.Module]:
        """Remove the hooks and return the root modules recorded, in creation order."""
        for h in self._handles:
            h.remove()
        self._handles = []
        alive = [m for m in (r() for r in self._seen) if m is not None]
        self._seen, self._ids = [], set()
        roots = _roots(alive)
        return roots


def _roots(modules: list[nn.Module]) -> list[nn.Module]:
    inner: set[int] = set()
    for m in modules:
        if getattr(m, "_distrib_transparent", False):
            continue
        for sub in m.modules():
            if sub is not m:
                inner.add(id(sub))
    out = []
    for m in modules:
        if id(m) in inner:
            continue
        if getattr(m, "_distrib_transparent", False):
            out.extend(_roots([c for c in m.children()]))
            continue
        out.append(m)
    # De-duplicate while keeping order.
    seen: set[int] = set()
    return [m for m in out if not (id(m) in seen or seen.add(id(m)))]  # type: ignore[func-returns-value]


def _sum_hook(group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    assert work is not None
    fut: torch.futures.Future[torch.Tensor] = work.get_future().then(lambda f: f.value()[0])
    return fut


def _forward_frame(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a replicated module's forward from a frame of distrib's own.

    DDP's forward hooks stop TorchDynamo where a compiled function calls the module;
    the forward then runs as a new frame, which TorchDynamo compiles on its own only
    if it is not torch's (``nn.Sequential.forward`` is) — this frame is distrib's.
    """
    return forward(*args, **kwargs)


def mark_replicated(module: nn.Module) -> None:
    """Record that a strategy has set ``module`` up (``fit`` checks every trainable parameter is)."""
    object.__setattr__(module, "_distrib_replicated", True)


def replicate_module(module: nn.Module, device: torch.device, group: Any,
                     bucket_cap_mb: float | None,
                     guard: Callable[[str], Any]) -> None:
    """Move ``module`` to ``device`` and attach SUM gradient all-reduce over ``group``.

    ``group`` None (one replica) only moves the module.
    """
    if getattr(module, "_distrib_replicated", False):
        return
    module.to(device)
    trainable = [p for p in module.parameters() if p.requires_grad]
    if group is None or not trainable:
        return
    device_id = device if device.type == "cuda" else None
    # Convolutions with one input channel produce gradients whose strides differ from the
    # bucket's (harmless: DDP copies them); the warning would print on every replica.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    with guard("broadcasting the initial parameters from the chief"):
        ddp = torch_adapter.replicate(module, group, device_id=device_id,
                                      bucket_cap_mb=bucket_cap_mb)
    # SUM, not DDP's mean (TF's contract): all-reduce each bucket without dividing.
    torch_adapter.register_comm_hook(ddp, group, _sum_hook)
    module.forward = functools.partial(_forward_frame, module.forward)  # type: ignore[method-assign]
    mark_replicated(module)
