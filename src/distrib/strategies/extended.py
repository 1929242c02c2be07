"""``StrategyExtended``: the library API every strategy configures.

Its public methods (``replica_group``, collectives, running steps, input, modules and
state, optimizer steps, the scope) are what the other layers call; each delegates to an
``_underscore`` hook that a strategy file overrides.  :class:`~distrib.strategies.base.Strategy`
is the user API on top of it.

Example::

    ext = distrib.get_strategy().extended
    ext.replica_group.num_replicas_in_sync   # 1
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from torch import nn
from torch.utils.data import DataLoader

from distrib.cluster import ClusterResolver
from distrib.comm import collectives
from distrib.comm.group import Communicator
from distrib.comm.ops import CommunicationOptions, ReduceOp
from distrib.data import Dataset
from distrib.distribute import context
from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.replica_context import ReplicaContext
from distrib.distribute.sync_on_read import SyncOnReadGroup
from distrib.distribute.values import Mirrored, unwrap
from distrib.input import (
    DistributedDataset,
    InputContext,
    InputOptions,
    distribute_dataset,
    distribute_datasets_from_function,
)
from distrib.input.digest import check_same_data
from distrib.nest import Nest
from distrib.strategies._optimizer_steps import OptimizerSteps, OptimizerT
from distrib.strategies._replication import is_replicated, keeps_in_sync, replicate_module
from distrib.strategies._scope_tracker import Gather, ModuleTracker

if TYPE_CHECKING:
    from distrib.strategies.base import Strategy

__all__ = ["StrategyExtended", "OptimizerT", "DatasetT", "InputT", "ResultT", "StepRunner"]

#: A dataset batched by the global batch size, as ``distribute_dataset`` takes it (a
#: ``distrib.data.Dataset`` or a ``DataLoader``); what a strategy gives back when each
#: worker reads all of its input (parameter servers) is the same object.
DatasetT = TypeVar("DatasetT", bound="Dataset | DataLoader[Any]")
#: What ``dataset_fn`` of ``distribute_datasets_from_function`` returns (a dataset, or
#: anything ``distrib.input.as_dataset`` turns into one).
InputT = TypeVar("InputT")
#: What a replica function returns.
ResultT = TypeVar("ResultT")
_ResultT_co = TypeVar("_ResultT_co", covariant=True)


class StepRunner(Protocol[_ResultT_co]):
    """A replica function prepared to run as this replica's step (:meth:`StrategyExtended.step_runner`)."""

    def __call__(self, args: tuple[Nest, ...], global_batch_size: int | None = None
                 ) -> _ResultT_co: ...


# Every step runs when it is called: nothing to do around an execution (reusable, reentrant).
_EAGER_EXECUTION: contextlib.nullcontext[None] = contextlib.nullcontext()


class StrategyExtended(OptimizerSteps):
    """Library-facing half of a strategy: the replica group, placement and the strategy hooks.

    The public methods below are what the layers above use (input, checkpoints,
    ``Model``, the Estimator); each calls an ``_underscore`` hook that a strategy file
    overrides to change how it works.  A new strategy overrides hooks, never the public
    methods.  The hooks, and what the synchronous (replicated) strategies do in them:

    ``_setup_module(module: nn.Module) -> None``
        a root module created in ``scope()`` when the scope closes (or when ``fit`` runs
        inside it), and again at every ``compile``/``fit``: move it to the replica's
        device, broadcast the chief's values and attach SUM all-reduce of its gradients
        during ``backward`` (DDP's reducer); for a module already set up, refresh the
        reducer if its parameters or what trains changed.
    ``_keeps_in_sync(param: torch.Tensor) -> bool``
        whether the strategy keeps ``param`` equal on every replica (it set up its
        module).  ``unreplicated_parameters`` and the optimizer steps ask it.
    ``_setup_optimizer(optimizer: OptimizerT) -> OptimizerT``
        an optimizer (``compile``, the Estimator) about to train the strategy's modules;
        returns what to use.  Nothing more to do for the synchronous strategies.
    ``_manages_optimizer(optimizer) -> bool`` / ``_before_optimizer_step(optimizer)`` /
    ``_after_optimizer_step(optimizer)``
        the optimizer steps the strategy takes part in, whoever calls ``step()``:
        torch's global optimizer step hooks call them (``_step_hooks``) for every
        strategy of more than one replica and every strategy that asked with
        :meth:`intercept_optimizer_steps`.  By default a strategy manages an optimizer
        it set up, one that steps its parameters, or one that steps inside its scope or
        replica function; before the step it checks that every parameter stepped is
        one it keeps in sync, then calls ``_synchronize_gradients``.
    ``_synchronize_gradients(optimizer, record: StepRecord) -> None``
        make the gradients the step applies the sums over the replicas: those DDP
        summed during ``backward`` are left alone, every other gradient (autograd.grad,
        ``torch.func``, set by hand, added to after ``backward``) is summed here
        (``_gradient_sync``).  ``record`` partitions the optimizer's parameters.
    ``_sync_buffers(root: nn.Module) -> None``
        make the floating-point buffers (BatchNorm statistics) of ``root``'s modules the
        replicas' mean.
    ``_module_state_dict(module)`` / ``_load_module_state_dict(module, state)``,
    ``_optimizer_state_dict(optimizer)`` / ``_load_optimizer_state_dict(optimizer, state)``
        what a checkpoint saves and loads: the full state dicts.
    ``_distribute_dataset(dataset, options)`` / ``_distribute_datasets_from_function``
        how input reaches the replicas: each takes its slice of every global batch;
        the batch's placement on the device is ``replica_group.place_batch``.
    ``_call_for_each_replica(fn, args, kwargs, global_batch_size)``
        how a step runs (``strategy.run`` and ``Model.fit``): once, on this process's
        replica, in a :class:`ReplicaContext`.
    ``_step_runner(fn)``
        the same for a function run at every step (:meth:`step_runner`); a strategy that
        overrides ``_call_for_each_replica`` overrides this too.
    ``_execution()``
        a context around the steps that run as one execution (``steps_per_execution``
        steps of ``fit``, one call of a ``distrib.function``): nothing to do, every
        step runs when it is called.

    Args:
        comm: the replica group's communicator (None for a single replica).
        device: this replica's device.
        worker_devices: devices of this worker's replicas, as strings.
        wrap: whether values are wrapped in ``PerReplica`` (False for one-device strategies).
        cluster_resolver: the resolver the cluster came from, if any.
        options: the communication options (bucket size, timeout).
    """

    def __init__(self, comm: Communicator | None, device: torch.device,
                 worker_devices: tuple[str, ...], wrap: bool,
                 cluster_resolver: ClusterResolver | None = None,
                 options: CommunicationOptions | None = None) -> None:
        self._strategy: Strategy | None = None
        self._comm = comm
        self._device = device
        self._worker_devices = worker_devices
        self._wrap = wrap
        self._cluster_resolver = cluster_resolver
        self._options = options or CommunicationOptions()
        self._scope_depth = 0
        self._tracker: ModuleTracker | None = None
        self._group = _group_of(comm, device, wrap)
        self._sync_on_read = SyncOnReadGroup(self._group)
        self._start_optimizer_steps()

    # ----------------------------------------------------------- group facts
    @property
    def replica_group(self) -> ReplicaGroupInfo:
        """This replica's view of the group: sizes, ids, device and small collectives.

        Example:
            >>> distrib.get_strategy().extended.replica_group.num_replicas_in_sync
            1
        """
        return self._group

    @property
    def sync_on_read(self) -> SyncOnReadGroup:
        """The values summed across replicas when ``strategy.run`` returns (metrics).

        Example:
            >>> len(distrib.get_strategy().extended.sync_on_read)
            0
        """
        return self._sync_on_read

    @property
    def _num_replicas(self) -> int:
        return self._group.num_devices_in_sync

    @property
    def _replica_id(self) -> int:
        return self._group.replica_id

    @property
    def should_checkpoint(self) -> bool:
        """Whether this process should write checkpoints (the chief)."""
        return self._replica_id == 0

    @property
    def should_save_summary(self) -> bool:
        """Whether this process should write summaries and logs (the chief)."""
        return self._replica_id == 0

    @property
    def experimental_should_init(self) -> bool:
        return True

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """The devices of this worker's replicas."""
        return self._worker_devices

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return self._worker_devices

    @property
    def compiles_steps(self) -> bool:
        """Whether every step already runs compiled (TPU: by XLA), so ``jit_compile`` adds nothing."""
        return False

    def _in_multi_worker_mode(self) -> bool:
        return self._group.num_workers > 1

    # ----------------------------------------------------------- collectives
    def _guard(self, what: str) -> contextlib.AbstractContextManager[None]:
        return self._comm.guard(what) if self._comm is not None else contextlib.nullcontext()

    def reduce_to(self, reduce_op: ReduceOp | str, value: Nest, destinations: object = None,
                  options: CommunicationOptions | None = None) -> Mirrored:
        """Reduce ``value`` across replicas; the result is :class:`Mirrored` (TF's ``reduce_to``)."""
        op = ReduceOp.from_value(reduce_op)
        if isinstance(value, Mirrored) and op is ReduceOp.MEAN:
            return value
        local = unwrap(value)
        self._group.check_signature("reduce_to", local, ())
        return Mirrored((self._group.all_reduce(op, local),))

    def batch_reduce_to(self, reduce_op: ReduceOp | str,
                        value_destination_pairs: list[tuple[Nest, object]],
                        options: CommunicationOptions | None = None) -> list[Mirrored]:
        """:meth:`reduce_to` for a list of ``(value, destinations)`` pairs."""
        return [self.reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    # ------------------------------------------------------------ running steps
    def call_for_each_replica(self, fn: Callable[..., ResultT], args: tuple[Nest, ...] = (),
                              kwargs: Mapping[str, Nest] | None = None, *,
                              global_batch_size: int | None = None) -> ResultT:
        """Run ``fn`` on this process's replica in replica context; returns its raw result.

        ``args`` and ``kwargs`` are unwrapped to this replica's components.
        ``global_batch_size``, when the caller knows the number of examples of this
        step over all replicas, is available to the replica as
        ``get_replica_context().global_batch_size(...)`` without a collective.
        """
        digest = self._group.data_check.take()
        if digest is not None and self._group.num_replicas_in_sync > 1:
            # The input's fingerprint of this step's global batch (a custom loop's data
            # check, on the few steps the input fingerprints): every replica compares.
            check_same_data([d for (d,) in self._group.each([digest])],
                            self._group.local_replicas)
        return self._call_for_each_replica(fn, unwrap(tuple(args)),
                                           unwrap(kwargs) if kwargs else {}, global_batch_size)

    def _call_for_each_replica(self, fn: Callable[..., ResultT], args: tuple[Nest, ...],
                               kwargs: dict[str, Nest], global_batch_size: int | None
                               ) -> ResultT:
        strategy = self._strategy
        assert strategy is not None
        ctx = ReplicaContext(strategy, self._group.replica_id, global_batch_size)
        if self._comm is None:  # a group of one: no collective to guard
            with context.enter(strategy, ctx):
                return fn(*args, **kwargs)
        with context.enter(strategy, ctx), self._comm.guard("running the replica function"):
            return fn(*args, **kwargs)

    def step_runner(self, fn: Callable[..., ResultT]) -> StepRunner[ResultT]:
        """``fn`` prepared to run as this replica's step many times.

        ``runner(args, global_batch_size)`` is
        ``call_for_each_replica(fn, args, global_batch_size=global_batch_size)`` for
        ``args`` that hold no distributed value (this replica's own batch), with the
        work that is the same at every step done once.  ``Model.fit`` runs its training
        steps through one.

        Example::

            step = strategy.extended.step_runner(train_step)
            for batch in batches:
                step((batch,), 64)
        """
        return self._step_runner(fn)

    def _step_runner(self, fn: Callable[..., ResultT]) -> StepRunner[ResultT]:
        strategy = self._strategy
        assert strategy is not None
        step: StepRunner[ResultT] = context.ReplicaStep(strategy, self._group.replica_id, fn)
        comm = self._comm
        if comm is None:  # a group of one: no collective to guard
            return step

        def guarded(args: tuple[Nest, ...], global_batch_size: int | None = None) -> ResultT:
            with comm.guard("running the replica function"):
                return step(args, global_batch_size)
        return guarded

    def execution(self) -> contextlib.AbstractContextManager[None]:
        """A context around steps that form one execution (TF's ``steps_per_execution``).

        ``fit`` runs each group of ``steps_per_execution`` steps in one, and a
        ``distrib.function`` call is one.  A strategy that compiles its steps (TPU) traces
        the steps of the outermost execution and runs them as one program when it
        exits; the others run every step when it is called.  Contexts nest.

        Example::

            with strategy.extended.execution():
                for _ in range(8):
                    strategy.run(step, args=(next(iterator),))
        """
        return self._execution()

    def _execution(self) -> contextlib.AbstractContextManager[None]:
        return _EAGER_EXECUTION

    # ------------------------------------------------------------------ input
    def distribute_dataset(self, dataset: DatasetT, options: InputOptions | None = None
                           ) -> DistributedDataset | DatasetT:
        """This strategy's distributed form of a globally batched ``dataset`` (a
        ``distrib.data.Dataset`` or a ``DataLoader``): a ``DistributedDataset`` for the
        synchronous strategies, the dataset itself where each worker reads all of it
        (parameter servers)."""
        return self._distribute_dataset(dataset, options)

    def _distribute_dataset(self, dataset: DatasetT, options: InputOptions | None
                            ) -> DistributedDataset | DatasetT:
        return distribute_dataset(dataset, self._group, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                          options: InputOptions | None = None
                                          ) -> DistributedDataset | InputT:
        """This strategy's input pipelines built by ``dataset_fn(InputContext)``."""
        return self._distribute_datasets_from_function(dataset_fn, options)

    def _distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                           options: InputOptions | None
                                           ) -> DistributedDataset | InputT:
        return distribute_datasets_from_function(dataset_fn, self._group, options)

    # ------------------------------------------------------ modules and state
    def setup_module(self, module: nn.Module) -> None:
        """Make ``module`` this strategy's (what closing ``scope()`` does to new modules)."""
        self._set_up(module)

    def _set_up(self, module: nn.Module) -> None:
        self._setup_module(module)
        self._setups += 1

    def _setup_module(self, module: nn.Module) -> None:
        group = self._comm.group if self._comm is not None and \
            self._comm.world_size > 1 else None
        cap = self._options.bytes_per_pack / 2**20 if self._options.bytes_per_pack else None
        replicate_module(module, self._device, group, cap, self._guard,
                         all_gather=self._group.all_gather if group is not None else None)

    def setup_scope_modules(self) -> None:
        """Set up now the modules created so far in the open ``scope()`` (as closing it will).

        ``Model.fit``, ``evaluate`` and ``predict`` called inside the ``with
        strategy.scope():`` block that created the model need its modules replicated
        before the first step.  Every replica must call it.
        """
        if self._tracker is not None:
            for root in self._tracker.roots(self._agreement()):
                self._set_up(root)

    def refresh_modules(self, root: nn.Module) -> None:
        """Bring every module of ``root`` this strategy set up in line with what it holds and
        trains now (layers added, ``requires_grad`` changed).  Every replica calls it."""
        for module in list(root.modules()):
            if is_replicated(module):
                self._set_up(module)

    def keeps_in_sync(self, param: torch.Tensor) -> bool:
        """Whether this strategy keeps ``param`` equal on every replica (it set up its module).

        Example:
            >>> distrib.get_strategy().extended.keeps_in_sync(torch.nn.Parameter(torch.ones(1)))
            False
        """
        return self._keeps_in_sync(param)

    def _keeps_in_sync(self, param: torch.Tensor) -> bool:
        return keeps_in_sync(param)

    def unreplicated_parameters(self, root: nn.Module) -> list[str]:
        """Names of ``root``'s trainable parameters that no replica group keeps in sync
        (made outside ``scope()``); empty on a single replica.

        Example:
            >>> distrib.get_strategy().extended.unreplicated_parameters(torch.nn.Linear(1, 1))
            []
        """
        if self._group.num_replicas_in_sync == 1:  # one replica program (TPU: one per host)
            return []
        return [n for n, p in root.named_parameters()
                if p.requires_grad and not self._keeps_in_sync(p)]

    @property
    def should_use_with_coordinator(self) -> bool:
        """Whether training runs through a ``ClusterCoordinator`` (ParameterServerStrategy):
        ``Model.fit`` then schedules its steps on the workers instead of running them here."""
        return False

    def sync_buffers(self, root: nn.Module) -> None:
        """Average the floating-point buffers of ``root``'s replicated modules (BatchNorm's
        running statistics) over the replicas.  Every replica calls it.

        Each replica updates its buffers from its own batches, as in TensorFlow, where
        they are ``ON_READ`` variables aggregated by ``MEAN``: reading one outside the
        replica function gives the replicas' mean.  The running averages are linear, so
        replacing every replica's copy by the mean at any step changes no later mean; it
        makes every replica hold, evaluate with and save the value TensorFlow reads.
        ``fit`` calls it after every epoch, ``evaluate``, ``predict`` and the save methods
        before they start.

        Example:
            >>> bn = torch.nn.BatchNorm1d(2)
            >>> distrib.get_strategy().extended.sync_buffers(bn)   # one replica: nothing to do
        """
        if self._group.num_replicas_in_sync > 1:
            self._sync_buffers(root)

    def _sync_buffers(self, root: nn.Module) -> None:
        seen: set[int] = set()
        buffers = []
        for module in root.modules():
            if not is_replicated(module):
                continue
            for b in module.buffers():
                if b.is_floating_point() and id(b) not in seen:
                    seen.add(id(b))
                    buffers.append(b)
        if not buffers:
            return
        with torch.no_grad():
            means = self._group.all_reduce(ReduceOp.MEAN, [b.detach() for b in buffers])
            for b, mean in zip(buffers, means):
                b.copy_(mean)

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """What a checkpoint saves for ``module`` (every replica calls; all hold it)."""
        self.sync_buffers(module)
        return self._module_state_dict(module)

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        return dict(module.state_dict())

    def load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        """Load what :meth:`module_state_dict` saved into ``module``, on every replica."""
        self._load_module_state_dict(module, state)

    def _load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        module.load_state_dict(state)

    # ------------------------------------------------------------------ scope
    def _enter_scope(self) -> None:
        self._scope_depth += 1
        if self._scope_depth == 1:
            self._tracker = ModuleTracker()
            self._tracker.start()

    def _agreement(self) -> Gather | None:
        """The all-gather the replicas agree with on the modules a scope created."""
        return self._group.all_gather if self._group.num_replicas_in_sync > 1 else None

    def _exit_scope(self, agree: bool = True) -> None:
        self._scope_depth -= 1
        if self._scope_depth == 0 and self._tracker is not None and not agree:
            self._tracker.stop(None)  # an exception unwinds: no collective, nothing set up
            self._tracker = None
        if self._scope_depth == 0 and self._tracker is not None:
            roots = self._tracker.stop(self._agreement())
            self._tracker = None
            for root in roots:
                self._set_up(root)


def _group_of(comm: Communicator | None, device: torch.device, wrap: bool
              ) -> ReplicaGroupInfo:
    """The :class:`ReplicaGroupInfo` of a communicator (a group of one without one)."""
    if comm is None or comm.world_size == 1:
        return ReplicaGroupInfo.single(device, wrap_per_replica=wrap)
    plan = comm.plan
    return ReplicaGroupInfo(
        num_replicas_in_sync=comm.world_size, replica_id=comm.rank,
        num_workers=plan.num_workers, worker_index=plan.id_in_cluster,
        local_replicas=plan.local_world_size, local_replica_id=plan.local_rank,
        device=device, wrap_per_replica=wrap,
        all_reduce_sum=lambda t: collectives.all_reduce(comm, ReduceOp.SUM, t),
        all_reduce=lambda op, value: collectives.all_reduce_nest(comm, op, value),
        all_gather=lambda t, axis: collectives.all_gather(comm, t, axis),
        check_signature=lambda what, value, free: collectives.check_same_signature(
            comm, what, value, free),
        checkpoint_group=comm.io_group)
