"""Modules created inside ``strategy.scope()`` become replicated (TF's variable creator scope).

The root modules a scope created (``_scope_tracker``: the same ones on every replica)
are moved to the replica's device and handed to torch's own data-parallel machinery (the
composable form of DDP, ``replicate``): parameters are broadcast from the chief
now, and from then on gradients are all-reduced in buckets while the backward
pass runs.  The reduction is a SUM, TF's contract, not DDP's mean.

What trains may change after the scope closed (``requires_grad_``, Keras'
``trainable``): DDP's reducer only knows the parameters that required gradients
when it was built.  Every forward pass of a replicated module therefore compares
its parameters' ``requires_grad`` flags with those the reducer was built for
(a tuple comparison, no communication); when they differ, the replicas first
check with one small all-gather that every one of them made the same change,
then the reducer is rebuilt for the new set (which broadcasts the parameters
from the chief again).  A replica that froze or unfroze something the others did
not raises an error on every replica instead of drifting apart.

Gradients summed by ``backward`` are marked as such (the reducer's
:class:`~distrib.comm.torch_adapter.ReductionState`), so that an optimizer step does
not sum them again (``_gradient_sync``).  A forward pass that starts while they are
still held — a second micro-batch that will add its gradients to them — first makes
them local shares again: the chief keeps the sums, the other replicas zero theirs, so
that whatever is added next and summed (by the next ``backward`` or at the step) is
counted once.

A module with lazy parameters (``nn.LazyLinear``, Keras' ``Dense(64)`` habit) is
replicated after its first forward pass, which creates them: the values it holds are
the chief's from the start, those a lazy layer creates are broadcast before it uses
them, and the first batch's gradients are summed at the optimizer step.

A module class can opt out of being a root — its children are replicated
instead — by setting ``_distrib_transparent = True`` (wrappers that call their
children directly).

Example::

    with strategy.scope():
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    # net's parameters are now identical on every replica.
    net[0].requires_grad_(False)   # the next forward rebuilds the reducer, on every replica
"""

from __future__ import annotations

import functools
import hashlib
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy

from distrib.comm import collectives, torch_adapter
from distrib.distribute.group import gather_lists
from distrib.errors import UsageError, explain
from distrib.strategies._scope_tracker import Gather, untracked

__all__ = ["mark_replicated", "replicate_module", "is_replicated",
           "replicated_parameters", "keeps_in_sync", "lazy_parts", "ChiefValuesWhenCreated"]

# id(parameter) -> weak reference, for every parameter of a module replicate_module set up
# over a group (its value is the chief's; its gradient is summed by backward or at a step).
_IN_SYNC: dict[int, weakref.ref[torch.Tensor]] = {}


def _note_in_sync(params: list[nn.Parameter]) -> None:
    for p in params:
        key = id(p)
        _IN_SYNC[key] = weakref.ref(p, functools.partial(_forget, key))


def _forget(key: int, ref: weakref.ref[torch.Tensor]) -> None:
    if _IN_SYNC.get(key) is ref:
        del _IN_SYNC[key]


def keeps_in_sync(param: torch.Tensor) -> bool:
    """Whether ``param`` belongs to a module :func:`replicate_module` set up over a group
    (its value is the chief's, and its gradients are summed over the group)."""
    ref = _IN_SYNC.get(id(param))
    return ref is not None and ref() is param


def _forward_frame(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a replicated module's forward from a frame of distrib's own.

    DDP's forward hooks stop TorchDynamo where a compiled function calls the module;
    the forward then runs as a new frame, which TorchDynamo compiles on its own only
    if it is not torch's (``nn.Sequential.forward`` is) — this frame is distrib's.
    """
    return forward(*args, **kwargs)


def mark_replicated(module: nn.Module) -> None:
    """Record that a strategy has set ``module`` up: its parameters are kept in sync
    (:func:`keeps_in_sync`; ``fit`` checks every trainable parameter is)."""
    object.__setattr__(module, "_distrib_replicated", True)
    _note_in_sync(list(module.parameters()))

def is_replicated(module: nn.Module) -> bool:
    """Whether a strategy replicated ``module`` (its gradients are summed across replicas)."""
    return bool(getattr(module, "_distrib_replicated", False))


def replicated_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters of ``module`` whose gradients its replica group sums."""
    reducer = getattr(module, "_distrib_reducer", None)
    if isinstance(reducer, _Reducer):
        return list(reducer.params)
    return list(module.parameters()) if is_replicated(module) else []  # set up otherwise (TPU)


class _Reducer:
    """Keeps one replicated module's DDP reducer in step with what trains.

    ``flags`` are the ``requires_grad`` flags the reducer was built for.  The forward
    pre-hook (installed before DDP's own) rebuilds it when they change.
    """

    def __init__(self, module: nn.Module, group: Any, ddp_kwargs: dict[str, Any],
                 all_gather: Gather | None, guard: Callable[[str], Any],
                 reduction: torch_adapter.ReductionState) -> None:
        self.group = group
        self.ddp_kwargs = ddp_kwargs
        self.all_gather = all_gather
        self.guard = guard
        self.reduction = reduction
        self.chief = dist.get_rank(group) == 0
        self.params: list[nn.Parameter] = list(module.parameters())
        self.flags = tuple(p.requires_grad for p in self.params)
        _note_in_sync(self.params)

    def pre_forward(self, module: nn.Module, args: Any) -> None:
        flags = tuple(p.requires_grad for p in self.params)
        if flags != self.flags:
            _agree_on_trainable(self.all_gather, self.params, flags, self.guard)
            self.rebuild(module, self.params, flags)
        if self.reduction.reduced and torch.is_grad_enabled():
            self.share()

    def share(self) -> None:
        """Make the summed gradients local shares again (the chief keeps the sums).

        A forward pass that starts while ``backward``'s sums are held may add to them
        (gradient accumulation); summing the total again would count the held part once
        per replica.  No collective: the shares add up to the sums held.
        """
        self.reduction.reduced = False
        if not self.chief:
            with torch.no_grad():
                for p in self.params:
                    if p.grad is not None:
                        p.grad.zero_()

    def refresh(self, module: nn.Module) -> None:
        """At a point every replica reaches (compile, fit): check that all of them train
        the same parameters, and rebuild if layers were added or replaced or what trains
        changed."""
        params = list(module.parameters())
        flags = tuple(p.requires_grad for p in params)
        _agree_on_trainable(self.all_gather, params, flags, self.guard)
        same = len(params) == len(self.params) and all(
            a is b for a, b in zip(params, self.params))
        if not same or flags != self.flags:
            self.rebuild(module, params, flags)

    def rebuild(self, module: nn.Module, params: list[nn.Parameter],
                flags: tuple[bool, ...]) -> None:
        """Rebuild DDP's reducer for ``params`` with ``flags`` (every replica agreed)."""
        self.params, self.flags = params, flags
        _note_in_sync(params)

        def make_ddp(plist: nn.ParameterList) -> nn.parallel.DistributedDataParallel:
            with self.guard("rebuilding the gradient reducer for a changed set of "
                            "trainable parameters"), _grad_strides_quiet(), untracked():
                ddp = nn.parallel.DistributedDataParallel(plist, **self.ddp_kwargs)
            torch_adapter.register_comm_hook(ddp, self.group, collectives.sum_gradient_bucket,
                                             self.reduction)
            return ddp

        # Nothing trains: forward passes no longer prepare a reduction.
        torch_adapter.replace_reducer(module, params, make_ddp if any(flags) else None,
                                      self.reduction)


def _flags_hash(params: list[nn.Parameter], flags: tuple[bool, ...]) -> int:
    shapes = ";".join(f"{tuple(p.shape)}{int(f)}" for p, f in zip(params, flags))
    return int.from_bytes(hashlib.blake2b(shapes.encode(), digest_size=7).digest(), "big")


def _agree_on_trainable(all_gather: Gather | None, params: list[nn.Parameter],
                        flags: tuple[bool, ...], guard: Callable[[str], Any]) -> None:
    """Raise on every replica unless all of them train the same parameters."""
    if all_gather is None:
        return
    with guard("checking that every replica trains the same parameters"):
        every = gather_lists(all_gather, [_flags_hash(params, flags), sum(flags), len(flags)])
    if all(row[0] == every[0][0] for row in every):
        return
    sets = ", ".join(f"replica {r}: {row[1]} of {row[2]} parameters train"
                     for r, row in enumerate(every))
    raise UsageError(explain(
        "trainable parameters", sets,
        "the replicas changed what trains (requires_grad_, trainable) differently; their "
        "copies of the model would drift apart",
        "freeze and unfreeze the same parameters on every replica (not under `if chief:`), "
        "and add layers inside `strategy.scope()`"))


class _grad_strides_quiet(warnings.catch_warnings):
    """Convolutions with one input channel produce gradients whose strides differ from the
    bucket's (harmless: DDP copies them); the warning would print on every replica."""

    def __enter__(self) -> None:
        super().__enter__()
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")


def replicate_module(module: nn.Module, device: torch.device, group: Any,
                     bucket_cap_mb: float | None,
                     guard: Callable[[str], Any], all_gather: Gather | None = None,
                     init_sync: bool = True) -> None:
    """Move ``module`` to ``device`` and attach SUM gradient all-reduce over ``group``.

    ``group`` None (one replica) only moves the module.  A module already replicated
    is refreshed instead: parameters added or replaced since, or a changed set of
    trainable parameters, rebuild its reducer (every replica must call it).
    ``all_gather`` (the replica group's) checks that every replica trains the same set.
    A module with lazy parameters is replicated after its first forward pass
    (:class:`ChiefValuesWhenCreated`); ``init_sync=False`` skips the broadcast of values already equal.
    """
    reducer = getattr(module, "_distrib_reducer", None)
    if isinstance(reducer, _Reducer):
        reducer.refresh(module)
        return
    if is_replicated(module) or "_distrib_deferred" in module.__dict__:
        return
    if group is not None and lazy_parts(module):
        _defer(module, device, group, bucket_cap_mb, guard, all_gather)
        return
    module.to(device)
    params = list(module.parameters())
    if group is None or not params:
        return
    device_id = device if device.type == "cuda" else None
    ddp_kwargs: dict[str, Any] = {"process_group": group,
                                  "device_ids": [device] if device_id is not None else None}
    if bucket_cap_mb:
        ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb
    # Convolutions with one input channel produce gradients whose strides differ from the
    # bucket's (harmless: DDP copies them); the warning would print on every replica.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    flags = tuple(p.requires_grad for p in params)
    reduction = torch_adapter.ReductionState()
    try:
        if not any(flags):  # DDP needs one trainable parameter; the broadcast covers all
            for p in params:
                p.requires_grad_(True)
        with guard("broadcasting the initial parameters from the chief"), untracked():
            ddp = torch_adapter.replicate(module, group, device_id=device_id,
                                          bucket_cap_mb=bucket_cap_mb, reduction=reduction,
                                          init_sync=init_sync)
    finally:
        for p, flag in zip(params, flags):
            p.requires_grad_(flag)
    # SUM, not DDP's mean (TF's contract): all-reduce each bucket without dividing.
    torch_adapter.register_comm_hook(ddp, group, collectives.sum_gradient_bucket, reduction)
    reducer = _Reducer(module, group, ddp_kwargs, all_gather, guard, reduction)
    if not any(flags):
        reducer.rebuild(module, params, flags)
    module.register_forward_pre_hook(reducer.pre_forward, prepend=True)
    object.__setattr__(module, "_distrib_reducer", reducer)
    module.forward = functools.partial(_forward_frame, module.forward)  # type: ignore[method-assign]
    mark_replicated(module)


def lazy_parts(module: nn.Module) -> list[nn.Module]:
    """The submodules of ``module`` (itself included) whose parameters are still to be
    created by their first forward pass (``nn.LazyLinear`` and the other lazy modules)."""
    return [m for m in module.modules() if is_lazy_module(m)]


def is_lazy_module(module: nn.Module) -> bool:
    """Whether ``module`` still has parameters its first forward pass will create."""
    return isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()


class ChiefValuesWhenCreated:
    """Give every replica the chief's values of ``module``, lazy parameters included.

    The values ``module`` holds are broadcast from the chief now; a lazy submodule's are
    broadcast as soon as its first forward pass creates them, before it computes with
    them.  ``then(module)`` runs when a forward pass of ``module`` ends with nothing
    left to create.  Every replica must set it up at the same point.

    Example::

        ChiefValuesWhenCreated(net, group, guard, then=None)   # net has an nn.LazyLinear
        net(x)      # creates the LazyLinear's weight, the chief's on every replica
    """

    def __init__(self, module: nn.Module, group: Any, guard: Callable[[str], Any],
                 then: Callable[[nn.Module], None] | None) -> None:
        self.group, self.guard, self.then = group, guard, then
        self.chief = dist.get_global_rank(group, 0)
        self.done: set[int] = set()
        self.broadcast([t for t in (*module.parameters(), *module.buffers()) if not is_lazy(t)])
        _note_in_sync(list(module.parameters()))
        self.handles = [m.register_forward_pre_hook(self.created) for m in lazy_parts(module)]
        self.handles.append(module.register_forward_hook(self.forward_done))
        module.__dict__["_distrib_deferred"] = self

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        with torch.no_grad(), self.guard("broadcasting the initial parameters from the chief"):
            for t in tensors:
                dist.broadcast(t, src=self.chief, group=self.group)

    def created(self, module: nn.Module, args: Any) -> None:
        """After a lazy submodule's own hook created its parameters: the chief's values."""
        if id(module) in self.done or is_lazy_module(module):
            return
        self.done.add(id(module))
        self.broadcast([*module.parameters(recurse=False), *module.buffers(recurse=False)])

    def forward_done(self, module: nn.Module, args: Any, output: Any) -> None:
        if lazy_parts(module):
            return  # a branch that did not run: wait for the forward pass that creates it
        for handle in self.handles:
            handle.remove()
        del module.__dict__["_distrib_deferred"]
        if self.then is not None:
            self.then(module)


def _defer(module: nn.Module, device: torch.device, group: Any,
           bucket_cap_mb: float | None, guard: Callable[[str], Any],
           all_gather: Gather | None) -> None:
    """Replicate ``module`` when its first forward pass has created its lazy parameters.

    No second broadcast then (that pass's backward still needs the values untouched);
    the gradients of that first batch, which no reducer saw, are summed at the
    optimizer step (``_gradient_sync``).
    """
    module.to(device)

    def replicate(m: nn.Module) -> None:
        replicate_module(m, device, group, bucket_cap_mb, guard, all_gather, init_sync=False)
    ChiefValuesWhenCreated(module, group, guard, replicate)
