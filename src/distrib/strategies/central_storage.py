"""``CentralStorageStrategy``: one copy of the variables, compute on every local device.

One machine only.  One process per compute device (as for every distrib strategy);
the chief's process owns the parameter device: at ``optimizer.step()`` the
gradients of every replica are summed onto the chief (a reduce, not an all-reduce),
the chief alone applies the update — the optimizer's state exists only there — and
the new values are broadcast to every replica before the next step.  With SGD in
float64 it ends where MirroredStrategy ends, and where one process on the global
batch ends.

Example::

    strategy = distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    with strategy.scope():
        net = nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)   # steps once, on the chief
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from distrib.cluster import ClusterResolver, auto_resolver
from distrib.comm import collectives
from distrib.comm.group import Communicator
from distrib.comm.ops import CommunicationOptions
from distrib.errors import ConfigError, explain
from distrib.strategies._gradient_sync import StepRecord
from distrib.strategies._processes import (
    checked_options,
    establish,
    parse_devices,
    select_devices,
)
from distrib.strategies._replication import (
    ChiefValuesWhenCreated,
    lazy_parts,
    mark_replicated,
)
from distrib.strategies.base import Strategy, StrategyExtended

__all__ = ["CentralStorageStrategy"]


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def _unflat(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    out, pos = [], 0
    for t in like:
        out.append(flat[pos:pos + t.numel()].view_as(t))
        pos += t.numel()
    return out


class CentralStorageExtended(StrategyExtended):
    """Reduce gradients onto the chief, update there once, broadcast the new values."""

    def __init__(self, comm: Communicator | None, device: torch.device,
                 compute_devices: tuple[str, ...], parameter_device: str,
                 resolver: ClusterResolver | None,
                 options: CommunicationOptions) -> None:
        super().__init__(comm, device, compute_devices, wrap=True, cluster_resolver=resolver,
                         options=options)
        self._parameter_device = parameter_device
        # The modules set up, in setup order (the same on every replica; a set's order
        # would follow memory addresses, which differ), and per optimizer the modules
        # whose buffers follow its steps: held with it, so garbage collection, which runs
        # at different moments on each replica, never changes what is broadcast.
        self._modules: list[weakref.ref[nn.Module]] = []
        self._setups = 0  # modules set up so far (what a cached list below was made from)
        self._stepped: weakref.WeakKeyDictionary[torch.optim.Optimizer,
                                                 tuple[tuple[int, ...], list[nn.Module]]] = \
            weakref.WeakKeyDictionary()
        self._owned: weakref.WeakValueDictionary[int, torch.Tensor] = \
            weakref.WeakValueDictionary()
        self.intercept_optimizer_steps()

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return (self._parameter_device,)

    def _states(self, module: nn.Module) -> list[torch.Tensor]:
        return [t for t in (*module.parameters(), *module.buffers())]

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        if self._comm is None or not tensors:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        with torch.no_grad():
            for group in by_dtype.values():
                flat = collectives.broadcast_(self._comm, _flat([t.detach() for t in group]))
                for t, v in zip(group, _unflat(flat, group)):
                    t.copy_(v)

    def _setup_module(self, module: nn.Module) -> None:
        if any(ref() is module for ref in self._modules):
            return
        module.to(self._device)
        if self._comm is not None and lazy_parts(module):  # values made by the first batch
            ChiefValuesWhenCreated(module, self._comm.group, self._guard, then=None)
        else:
            self._broadcast(self._states(module))  # every replica starts from the chief's
        self._modules = [ref for ref in self._modules if ref() is not None]
        self._modules.append(weakref.ref(module))
        self._setups += 1
        for p in module.parameters():
            self._owned[id(p)] = p
        mark_replicated(module)  # fit's check and sync_buffers: it is in sync

    def _keeps_in_sync(self, param: torch.Tensor) -> bool:
        return self._owned.get(id(param)) is param

    def _synchronize_gradients(self, optimizer: torch.optim.Optimizer,
                               record: StepRecord) -> None:
        # Every gradient, however it was computed, is local here (nothing reduces it
        # during backward): all of them are summed onto the chief.
        comm = self._comm
        params = record.in_sync
        if comm is None or not params:
            return
        has = torch.tensor([0.0 if p.grad is None else 1.0 for p in params],
                           dtype=torch.float64, device=self._device)
        collectives.reduce_to_chief(comm, has)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        for group in by_dtype.values():
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in group]
            flat = collectives.reduce_to_chief(comm, _flat(grads).clone())
            if comm.rank == 0:
                for p, g in zip(group, _unflat(flat, group)):
                    p.grad = g.clone()
        chief = comm.rank == 0
        for p, flag in zip(params, has.tolist()):
            if not chief or flag == 0.0:
                p.grad = None  # the update happens once, on the chief

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._comm is None:
            return
        tensors = list(self._step_record(optimizer).in_sync)
        for module in self._stepped_modules(optimizer, tensors):
            tensors.extend(module.buffers())
        self._broadcast(tensors)

    def _stepped_modules(self, optimizer: torch.optim.Optimizer,
                         params: list[torch.Tensor]) -> list[nn.Module]:
        """The set-up modules that own a parameter ``optimizer`` steps, in setup order."""
        known = self._stepped.get(optimizer)
        version = (self._setups, *map(id, params))  # compared exactly: no hash collisions
        if known is None or known[0] != version:
            ids = {id(p) for p in params}
            modules = [m for m in (ref() for ref in self._modules) if m is not None
                       and any(id(p) in ids for p in m.parameters())]
            known = (version, modules)
            self._stepped[optimizer] = known
        return known[1]


class CentralStorageStrategy(Strategy):
    """Synchronous training on this machine's devices with one central copy of the variables.

    Args:
        compute_devices: the devices that run the step (default: every local GPU,
            else one CPU), e.g. ``["cpu:0", "cpu:1"]``.
        parameter_device: where the variables live (default: the only compute device
            if there is one GPU, else ``"cpu:0"``); its updates run in the chief's
            process.

    Raises:
        ConfigError: the cluster has more than one worker (TF's rule: one machine).
    """

    def __init__(self, compute_devices: list[str] | None = None,
                 parameter_device: str | None = None) -> None:
        options = checked_options(None)
        resolver = auto_resolver()
        devices = select_devices(resolver, compute_devices)
        if resolver is not None and resolver.process_plan(len(devices)).num_workers > 1:
            raise ConfigError(explain(
                "cluster", resolver.cluster_spec().as_dict(), "CentralStorageStrategy keeps "
                "the variables on one machine: it cannot span several workers",
                "use MultiWorkerMirroredStrategy (synchronous) or ParameterServerStrategy "
                "(asynchronous) for a multi-worker cluster"))
        if parameter_device is None:
            parameter_device = devices[0] if len(devices) == 1 and \
                devices[0].startswith("cuda") else "cpu:0"
        else:
            parameter_device = parse_devices([parameter_device], "parameter_device")[0]
        comm, device = establish(resolver, devices, options)
        super().__init__(CentralStorageExtended(comm, device, tuple(devices), parameter_device,
                                                resolver, options))
