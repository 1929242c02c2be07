"""``ShardedStrategy``: data parallelism with parameters, gradients and optimizer state sharded.

ZeRO-3 on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``): each replica holds
``1/R`` of every parameter, of its gradient and of the optimizer's state; a module's
parameters are all-gathered just before its forward (and backward) and freed after, and
gradients are reduce-scattered — SUMmed, TensorFlow's contract, not FSDP's mean — so
every replica steps its own shard.  Input, ``run``, ``reduce``, ``fit`` and the
checkpoints work as under ``MirroredStrategy``; processes start the same way (a plain
``python train.py`` with ``devices=``, ``distrib run``, torchrun, TF_CONFIG).

How modules are sharded is a :class:`ShardingPlan`; the default, :class:`FullyShard`,
makes every submodule holding at least ``min_unit_params`` parameters (not already in a
unit below it) an FSDP unit, then the root module.  ``distrib.distribution``'s
``ModelParallel`` supplies a plan of its own (tensor parallelism over a mesh axis).

Parameters are replaced when a module is sharded (by DTensor parameters): an optimizer
created in the scope over the module's original parameters is switched to the sharded
ones at its first step, whoever calls ``step()``.

Checkpoints hold full tensors (gathered with torch's ``get_model_state_dict``), so a
checkpoint written on 2 shards restores on any number, and into a replicated strategy.

Example::

    strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"])
    with strategy.scope():
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                  torch.nn.Linear(256, 10))
        opt = torch.optim.Adam(net.parameters())
    # each replica holds half of every parameter and of Adam's moments
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from distrib.cluster import ClusterResolver, auto_resolver
from distrib.comm import collectives
from distrib.comm.group import Communicator
from distrib.comm.ops import CommunicationOptions
from distrib.errors import UsageError, explain
from distrib.nest import Nest
from distrib.strategies._dtensors import (
    check_mesh_size,
    full,
    is_dtensor,
    local,
    lookup,
    on_meta,
    refuse_lazy,
    reset_parameters,
    sum_gradients_in_fsdp,
    sum_into_shards,
    torch_errors_explained,
)
from distrib.strategies._gradient_sync import StepRecord
from distrib.strategies._processes import checked_options, establish, select_devices
from distrib.strategies._replication import is_replicated, mark_replicated
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import OptimizerT, ResultT, StepRunner

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["ShardedStrategy", "ShardedExtended", "ShardingPlan", "FullyShard", "MeshSpec"]


@runtime_checkable
class MeshSpec(Protocol):
    """A mesh to build once the processes exist: its shape and axis names
    (``distrib.distribution.DeviceMesh`` is one)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def axis_names(self) -> tuple[str, ...]: ...


class ShardingPlan(Protocol):
    """How a root module created in the strategy's scope is distributed over the mesh.

    ``apply`` replaces the module's parameters by DTensor parameters (every replica calls
    it, after the strategy broadcast the chief's values).  ``sum_gradients_over`` names a
    mesh axis over which the strategy SUM-all-reduces the gradients when an optimizer
    steps (None when ``apply`` arranged their reduction itself, as FSDP does).
    """

    @property
    def mesh(self) -> MeshSpec | None:
        """The mesh to apply the plan on (None: the strategy's own)."""

    @property
    def sum_gradients_over(self) -> str | None:
        """The mesh axis gradients are summed over at the optimizer step (None: none)."""

    def apply(self, module: nn.Module, mesh: DeviceMesh) -> None: ...


@dataclass
class FullyShard:
    """The default plan: FSDP2 units over the mesh's ``axis``.

    Every submodule whose parameters (those not already in a unit below it) number at
    least ``min_unit_params`` becomes a unit, then the root: a unit's parameters are
    gathered together before its forward and freed after it.  Smaller units free memory
    sooner and overlap more communication; each costs one all-gather and one
    reduce-scatter per step.  ``units`` overrides the choice: a predicate on submodules.

    Args:
        axis: the mesh axis parameters are sharded over.
        reshard_after_forward: free a unit's gathered parameters after its forward (ZeRO-3;
            False keeps them until the backward: ZeRO-2, more memory, one all-gather less
            per unit).  The root's stay gathered until the backward either way, as torch's
            default does.
        offload_params: keep the shards in CPU memory (torch's ``CPUOffloadPolicy``).
        mp_policy: torch's ``MixedPrecisionPolicy`` (None: compute in the parameters' dtype).
        min_unit_params: the size rule for units.
        units: a predicate that picks the units instead of the size rule.
    """

    axis: str = "data"
    reshard_after_forward: bool = True
    offload_params: bool = False
    mp_policy: Any = None
    min_unit_params: int = 100_000
    units: Callable[[nn.Module], bool] | None = None
    sum_gradients_over: str | None = None
    mesh: MeshSpec | None = None

    def unit_modules(self, root: nn.Module) -> list[nn.Module]:
        """The submodules that become units, children before their parents."""
        picked: list[nn.Module] = []

        def visit(m: nn.Module) -> int:
            count = sum(p.numel() for p in m.parameters(recurse=False))
            for child in m.children():
                count += visit(child)
            chosen = self.units(m) if self.units is not None else count >= self.min_unit_params
            if m is not root and chosen and count > 0:
                picked.append(m)
                return 0
            return count

        visit(root)
        return picked

    def apply(self, module: nn.Module, mesh: DeviceMesh) -> None:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        sub = mesh[self.axis] if mesh.ndim > 1 else mesh
        kwargs: dict[str, Any] = {"mesh": sub, "reshard_after_forward": self.reshard_after_forward}
        if self.offload_params:
            kwargs["offload_policy"] = CPUOffloadPolicy()
        if self.mp_policy is not None:
            kwargs["mp_policy"] = self.mp_policy
        units = self.unit_modules(module)
        for unit in units:
            fully_shard(unit, **kwargs)
        # The root's parameters are used again as soon as the backward starts: torch's own
        # default keeps them gathered after the forward (one all-gather less per step).
        fully_shard(module, **{**kwargs, "reshard_after_forward": False})
        for m in [*units, module]:
            sum_gradients_in_fsdp(m)


class ShardedExtended(StrategyExtended):
    """``StrategyExtended`` of the sharded strategies: modules go through a :class:`ShardingPlan`.

    Args:
        plan: how root modules are distributed over the mesh.
        mesh: the mesh's shape and axis names (None: one ``"data"`` axis over every replica).
        param_init: initialises a module created on the meta device once its shards have
            storage (None: every submodule's ``reset_parameters()``).
        (the others as for :class:`StrategyExtended`)
    """

    def __init__(self, comm: Communicator | None, device: torch.device,
                 worker_devices: tuple[str, ...], plan: ShardingPlan,
                 mesh: MeshSpec | None = None, cluster_resolver: Any = None,
                 options: CommunicationOptions | None = None,
                 param_init: Callable[[nn.Module], None] | None = None) -> None:
        super().__init__(comm, device, worker_devices, wrap=True,
                         cluster_resolver=cluster_resolver, options=options)
        self.plan = plan
        self.param_init = param_init if param_init is not None else reset_parameters
        world = comm.world_size if comm is not None else 1
        shape = tuple(mesh.shape) if mesh is not None else (world,)
        names = tuple(mesh.axis_names) if mesh is not None else ("data",)
        check_mesh_size(shape, names, world)
        self.mesh_shape, self.mesh_axis_names = shape, names
        self._meshes: dict[tuple[tuple[int, ...], tuple[str, ...]], DeviceMesh] = {}
        # Tensors compare elementwise: tables of tensors are keyed by identity.
        self._replaced: WeakIdKeyDictionary = WeakIdKeyDictionary()  # old -> sharded
        self._sharded: WeakIdKeyDictionary = WeakIdKeyDictionary()   # sharded -> sum group
        self._shardings = 0  # modules sharded so far: an optimizer seen before may need switching
        self._switched: weakref.WeakKeyDictionary[torch.optim.Optimizer, tuple[int, int]] = \
            weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ mesh
    @property
    def mesh(self) -> DeviceMesh | None:
        """torch's ``DeviceMesh`` over the replicas (None for a single replica)."""
        return self.mesh_for(None)

    def mesh_for(self, spec: MeshSpec | None) -> DeviceMesh | None:
        """torch's ``DeviceMesh`` of ``spec`` (None: the strategy's), built once per shape
        and axis names (a collective the first time: every replica calls it)."""
        if self._comm is None or self._comm.world_size == 1:
            return None
        shape = tuple(spec.shape) if spec is not None else self.mesh_shape
        names = tuple(spec.axis_names) if spec is not None else self.mesh_axis_names
        check_mesh_size(shape, names, self._comm.world_size)
        mesh = self._meshes.get((shape, names))
        if mesh is None:
            from torch.distributed.device_mesh import init_device_mesh
            with self._guard("building the device mesh"):
                mesh = init_device_mesh(self._device.type, shape, mesh_dim_names=names)
            self._meshes[(shape, names)] = mesh
        return mesh

    # --------------------------------------------------------------- modules
    def _setup_module(self, module: nn.Module) -> None:
        if is_replicated(module):
            return  # sharded already: its parameters are the plan's
        refuse_lazy(module)
        meta = on_meta(module)
        if not meta:
            module.to(self._device)
        plan, comm = self.plan, self._comm
        mesh = self.mesh_for(plan.mesh)
        if mesh is None or comm is None:
            if meta:
                self._materialize(module, None)
            mark_replicated(module)
            return
        if not meta:
            with torch.no_grad(), \
                    self._guard("broadcasting the initial parameters from the chief"):
                for t in [*module.parameters(), *module.buffers()]:
                    collectives.broadcast_(comm, t.data, 0)
        before = dict(module.named_parameters())
        plan.apply(module, mesh)
        if meta:
            self._materialize(module, comm)
            self._agree_on_replicated(module, comm, mesh)
        after = dict(module.named_parameters())
        for name, old in before.items():
            new = after.get(name)
            if new is not None and new is not old:
                self._replaced[old] = new
        axis = plan.sum_gradients_over
        sum_group = mesh.get_group(axis) if axis is not None and mesh[axis].size() > 1 \
            else None
        for p in after.values():
            self._sharded[p] = sum_group
        mark_replicated(module)
        self._shardings += 1
        self.intercept_optimizer_steps()

    def _call_for_each_replica(self, fn: Callable[..., ResultT], args: tuple[Nest, ...],
                               kwargs: dict[str, Nest], global_batch_size: int | None
                               ) -> ResultT:
        with torch_errors_explained(bool(self._shardings)):
            return super()._call_for_each_replica(fn, args, kwargs, global_batch_size)

    def _step_runner(self, fn: Callable[..., ResultT]) -> StepRunner[ResultT]:
        step = super()._step_runner(fn)

        def explained(args: tuple[Nest, ...], global_batch_size: int | None = None) -> ResultT:
            with torch_errors_explained(bool(self._shardings)):
                return step(args, global_batch_size)
        return explained

    def _materialize(self, module: nn.Module, comm: Communicator | None) -> None:
        """Give a module created on the meta device storage for its shards only, then
        initialise them (``param_init``, default every submodule's ``reset_parameters``).

        Each replica initialises its own shards from a seed the chief picks, offset by the
        replica's rank (shards of one tensor differ; the values follow the init's
        distribution, not one device's numbers); what several replicas hold alike is then
        made the same (:meth:`_agree_on_replicated`)."""
        module.to_empty(device=self._device)
        seed = torch.randint(0, 2**62, (1,), dtype=torch.int64)
        if comm is not None:
            with self._guard("agreeing on the seed that initialises the shards"):
                collectives.broadcast_(comm, seed, 0)
        rank = comm.rank if comm is not None else 0
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(int(seed.item()) + rank)
            self.param_init(module)

    def _agree_on_replicated(self, module: nn.Module, comm: Communicator,
                             root: DeviceMesh) -> None:
        """Give every tensor the plan left whole on several replicas, each initialised on
        its own, the values of the first of them: plain tensors the chief's, a DTensor's
        local part along each mesh axis it is replicated over (a ``Replicate`` placement,
        or an axis of the strategy's mesh outside the DTensor's own)."""
        from torch.distributed.tensor import DTensor
        with torch.no_grad(), self._guard("agreeing on the initial values of replicated "
                                          "parameters and buffers"):
            for t in [*module.parameters(), *module.buffers()]:
                if not isinstance(t, DTensor):
                    collectives.broadcast_(comm, t.data, 0)
                    continue
                own = t.device_mesh
                names = own.mesh_dim_names or ()
                axes = [(own, i) for i, placement in enumerate(t.placements)
                        if placement.is_replicate()]
                axes += [(root, i) for i, name in enumerate(root.mesh_dim_names or ())
                         if name not in names]
                for mesh, dim in axes:  # along each axis in turn: all agree with the first
                    if mesh.size(dim) > 1:
                        group = mesh.get_group(dim)
                        dist.broadcast(t.to_local(), src=dist.get_global_rank(group, 0),
                                       group=group)

    def _keeps_in_sync(self, param: torch.Tensor) -> bool:
        return param in self._sharded or super()._keeps_in_sync(param)

    # ------------------------------------------------------------ optimizers
    def _switch_parameters(self, optimizer: torch.optim.Optimizer) -> bool:
        """Point ``optimizer`` at the sharded parameters; whether it steps any of ours."""
        ours = False
        for group in optimizer.param_groups:
            params = group["params"]
            for i, p in enumerate(params):
                new = lookup(self._replaced, p)
                if new is not None:
                    if p in optimizer.state:
                        optimizer.state[new] = optimizer.state.pop(p)
                    params[i] = p = new
                ours = ours or p in self._sharded
        return ours

    def _setup_optimizer(self, optimizer: OptimizerT) -> OptimizerT:
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        if isinstance(inner, torch.optim.Optimizer) and self._switch_parameters(inner):
            self._records.pop(inner, None)  # made over the replaced parameters: renew it
            self._step_record(inner).claimed = True
        return optimizer

    def _switch_if_needed(self, optimizer: torch.optim.Optimizer) -> None:
        count = sum(len(g["params"]) for g in optimizer.param_groups)
        if self._switched.get(optimizer) != (count, self._shardings):
            self._switch_parameters(optimizer)
            self._switched[optimizer] = (count, self._shardings)

    def _manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        self._switch_if_needed(optimizer)
        return super()._manages_optimizer(optimizer)

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._switch_if_needed(optimizer)
        super()._before_optimizer_step(optimizer)

    def _synchronize_gradients(self, optimizer: torch.optim.Optimizer,
                               record: StepRecord) -> None:
        # FSDP summed the gradients of backward() (reduce-scatter); a whole-parameter
        # gradient set by hand is summed and sharded here; a plan's gradients are summed
        # here over its batch axis; each once.
        pending = [(p, lookup(self._sharded, p)) for p in record.pending()
                   if p in self._sharded and p.grad is not None]
        whole = [(p, group) for p, group in pending if is_dtensor(p) and not is_dtensor(p.grad)]
        todo = [(p, group) for p, group in pending if group is not None
                and (not is_dtensor(p) or is_dtensor(p.grad))]
        if not whole and not todo:
            return
        with self._guard("summing gradients over the mesh's batch axis"):
            sum_into_shards(whole)
            for p, group in todo:
                dist.all_reduce(local(p.grad), op=dist.ReduceOp.SUM,  # type: ignore[arg-type]
                                group=group)
        record.note_summed([p for p, _ in whole + todo])

    # ----------------------------------------------------------------- state
    def _is_sharded(self, module: nn.Module) -> bool:
        return any(p in self._sharded for p in module.parameters())

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if not self._is_sharded(module):
            return dict(module.state_dict())
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )
        with self._guard("gathering the full state of a sharded module"):
            return dict(get_model_state_dict(module, options=StateDictOptions(
                full_state_dict=True)))

    def _load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        if not self._is_sharded(module):
            module.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )
        with self._guard("loading a sharded module's state"):
            set_model_state_dict(module, state, options=StateDictOptions(full_state_dict=True))

    def _optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        self._switch_parameters(optimizer)
        state = dict(optimizer.state_dict())
        with self._guard("gathering the full optimizer state"):
            state["state"] = {k: {name: full(v) for name, v in slots.items()}
                              for k, slots in state["state"].items()}
        return state

    def _load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer,
                                   state: dict[str, Any]) -> None:
        self._switch_parameters(optimizer)
        from torch.distributed.tensor import DTensor, distribute_tensor
        params = [p for g in optimizer.param_groups for p in g["params"]]
        saved_ids = [i for g in state.get("param_groups", []) for i in g["params"]]
        by_id = dict(zip(saved_ids, params))
        slots_out: dict[Any, Any] = {}
        with self._guard("distributing the optimizer state to the shards"):
            for key, slots in state.get("state", {}).items():
                param = by_id.get(key)
                out = {}
                for name, value in slots.items():
                    if isinstance(param, DTensor) and isinstance(value, torch.Tensor) \
                            and not isinstance(value, DTensor) \
                            and tuple(value.shape) == tuple(param.shape):
                        value = distribute_tensor(value.to(param.device), param.device_mesh,
                                                  param.placements)
                    out[name] = value
                slots_out[key] = out
        optimizer.load_state_dict({**state, "state": slots_out})


class ShardedStrategy(Strategy):
    """Fully sharded data parallelism (ZeRO-3, FSDP2) over ``devices`` or a cluster.

    Args:
        mesh: the mesh's shape and axis names (e.g. ``distrib.distribution.DeviceMesh``);
            None: one ``"data"`` axis over every replica.
        reshard_after_forward: free gathered parameters after each unit's forward.
        offload_params: keep the parameter shards in CPU memory.
        mp_policy: torch's ``torch.distributed.fsdp.MixedPrecisionPolicy``.
        devices: local devices, one process each (``["cpu:0", "cpu:1"]``), as for
            ``MirroredStrategy``; None: from the cluster (TF_CONFIG, torchrun, SLURM), else
            every local GPU, else one CPU.
        cluster_resolver: where the cluster comes from (default: the environment).
        communication_options: a :class:`distrib.CommunicationOptions`.
        plan: how modules are sharded (default :class:`FullyShard` with the arguments above).
        min_unit_params: :class:`FullyShard`'s size rule for FSDP units.
        param_init: initialises modules created on the meta device (``with
            torch.device("meta"):`` in the scope) once sharded, on their shards only
            (None: every submodule's ``reset_parameters()``).

    Example::

        strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"])
        with strategy.scope():
            model = distrib.Model(make_net())
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, y, batch_size=64)
    """

    def __init__(self, mesh: MeshSpec | None = None, reshard_after_forward: bool = True,
                 offload_params: bool = False, mp_policy: Any = None, *,
                 devices: list[str] | None = None,
                 cluster_resolver: ClusterResolver | None = None,
                 communication_options: CommunicationOptions | None = None,
                 plan: ShardingPlan | None = None, min_unit_params: int = 100_000,
                 param_init: Callable[[nn.Module], None] | None = None) -> None:
        if mesh is not None and not isinstance(mesh, MeshSpec):
            raise UsageError(explain("mesh", mesh, "must give a shape and axis names",
                                     "pass distrib.distribution.DeviceMesh(shape=(2,), "
                                     "axis_names=('data',)) or None"))
        options = checked_options(communication_options)
        resolver = cluster_resolver if cluster_resolver is not None else auto_resolver()
        names = select_devices(resolver, devices)
        comm, device = establish(resolver, names, options)
        axis = mesh.axis_names[0] if mesh is not None else "data"
        chosen = plan if plan is not None else FullyShard(
            axis=axis, reshard_after_forward=reshard_after_forward,
            offload_params=offload_params, mp_policy=mp_policy,
            min_unit_params=min_unit_params)
        self._sharded_extended = ShardedExtended(comm, device, tuple(names), chosen, mesh,
                                                 cluster_resolver=resolver, options=options,
                                                 param_init=param_init)
        super().__init__(self._sharded_extended)

    @property
    def extended(self) -> ShardedExtended:
        return self._sharded_extended
