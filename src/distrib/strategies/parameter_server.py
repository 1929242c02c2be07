"""``ParameterServerStrategy``: asynchronous training with parameter servers.

The cluster (TF_CONFIG) has a ``chief`` (the coordinator: it runs the training
program), ``worker`` tasks and ``ps`` tasks.  Every task runs the same program; on a
``worker`` or ``ps`` task, creating the strategy serves the chief until it finishes
(TensorFlow's ``Server.join()``) and then exits the program with status 0.

On the chief, modules created in ``strategy.scope()`` have their parameters (and
buffers) placed on the ``ps`` tasks, round-robin, large ones sharded along dimension
0 by ``variable_partitioner``; an optimizer over them is re-created on the ``ps``
tasks, so its state lives with the variables.  Functions scheduled with
:class:`distrib.coordinator.ClusterCoordinator` run on the workers: each pulls the
current values, computes, and pushes gradients on ``optimizer.step()``; the ``ps``
applies them at once (no synchronisation between workers).

Tasks talk over gRPC, authenticated with the secret every task of the cluster shares
(``distrib run`` makes it; set ``DISTRIB_CLUSTER_SECRET`` on every task otherwise).

Example (every task runs this; ``distrib run --cluster chief=1,worker=2,ps=1 train.py``)::

    strategy = distrib.ParameterServerStrategy()        # workers and ps serve here
    with strategy.scope():
        net = nn.Linear(784, 10)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
    coordinator = distrib.coordinator.ClusterCoordinator(strategy)
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

import torch
from torch import nn

from distrib.cluster import ClusterResolver, ClusterSpec, auto_resolver
from distrib.cluster.env import require_cluster_secret
from distrib.cluster.roles import validate_cluster
from distrib.comm.ops import CommunicationOptions
from distrib.distribute.group import WrappedOptimizer
from distrib.errors import ConfigError, UsageError, explain
from distrib.input import DistributedDataset, InputContext, InputOptions
from distrib.mixed_precision import LossScaleOptimizer
from distrib.rpc import pickling
from distrib.rpc.auth import Authenticator
from distrib.rpc.coordination import ClusterClient
from distrib.rpc.executor import EXECUTOR_CODE_METHODS, ClosureExecutor
from distrib.rpc.loss_scales import PsLossScale
from distrib.rpc.placement import Placer, VariablePlacement
from distrib.rpc.service import TaskService
from distrib.rpc.transport import RpcClient, startup_timeout
from distrib.rpc.variables import (
    STORE_CODE_METHODS,
    STORE_METHODS,
    STORE_STREAM_METHODS,
    VariableClient,
    VariableStore,
)
from distrib.strategies._optimizer_steps import take_loss_scale
from distrib.strategies._processes import checked_options
from distrib.strategies._ps_metrics import MetricIncrements
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import DatasetT, InputT

__all__ = ["ParameterServerStrategy", "ParameterServerStrategyExtended"]


def _identity(value: Any) -> Any:
    return value


def _spec_of(resolver: Any) -> tuple[ClusterSpec, str, int]:
    spec = resolver.cluster_spec() if resolver is not None else ClusterSpec({})
    if not spec:
        raise ConfigError(explain("cluster_resolver", resolver, "Cluster spec must be non-empty "
                                  "in `tf.distribute.cluster_resolver.ClusterResolver`",
                                  "set TF_CONFIG with 'chief', 'worker' and 'ps' jobs, or start "
                                  "the program with `distrib run --cluster "
                                  "chief=1,worker=2,ps=1`"))
    validate_cluster(spec, resolver.task_type, resolver.task_id)
    for job, rule in (("ps", "There must be at least one ps."),
                      ("worker", "There must be at least one worker."),
                      ("chief", "ParameterServerStrategy needs a 'chief' task: it runs the "
                                "training program (the coordinator).")):
        if job not in spec.jobs:
            raise ConfigError(explain("cluster", spec.as_dict(), rule,
                                      f"add a {job!r} job to the cluster"))
    return spec, str(resolver.task_type), int(resolver.task_id)


def _secret() -> str:
    return require_cluster_secret("ParameterServerStrategy runs the functions the chief "
                                  "schedules on the workers")


class ParameterServerStrategyExtended(StrategyExtended):
    """The library half of :class:`ParameterServerStrategy` (see the module docstring)."""

    def __init__(self, resolver: ClusterResolver | None, spec: ClusterSpec, task_type: str,
                 task_id: int,
                 partitioner: Any, options: CommunicationOptions, secret: str) -> None:
        super().__init__(None, torch.device("cpu"), ("cpu:0",), wrap=False,
                         cluster_resolver=resolver, options=options)
        self._spec = spec
        self._role = task_type
        self._task = f"{task_type}:{task_id}"
        self._task_id = task_id
        self._placer = Placer(spec.num_tasks("ps"), partitioner)
        self._auth = Authenticator(secret)
        self._timeout = options.effective_timeout()
        self._cluster: ClusterClient | None = None
        self._executor: ClosureExecutor | None = None
        self._objects: dict[int, tuple[int, Any]] = {}  # id(obj) -> (per-worker id, obj)
        self._var_refs: dict[int, tuple[Any, ...]] = {}  # id(tensor) -> reference
        self._module_vars: dict[int, dict[str, VariablePlacement]] = {}
        self._hyper: dict[int, tuple[torch.optim.Optimizer, str]] = {}
        self._defining: set[int] = set()
        self._next_id = 0
        self._metrics = MetricIncrements()  # metrics that scheduled functions use

    # ---------------------------------------------------------------- facts
    @property
    def should_use_with_coordinator(self) -> bool:
        return True

    @property
    def num_workers(self) -> int:
        """The number of ``worker`` tasks (closures run there)."""
        return self._spec.num_tasks("worker")

    @property
    def num_ps(self) -> int:
        """The number of ``ps`` tasks (variables live there)."""
        return self._spec.num_tasks("ps")

    @property
    def should_checkpoint(self) -> bool:
        return self._role == "chief"

    @property
    def should_save_summary(self) -> bool:
        return self._role == "chief"

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(self.num_ps))

    def worker_name(self, index: int) -> str:
        """``"worker:<index>"``."""
        return f"worker:{index}"

    def _addresses(self, job: str) -> list[tuple[str, str]]:
        return [(f"{job}:{i}", self._spec.task_address(job, i))
                for i in range(self._spec.num_tasks(job))]

    def _chief(self) -> ClusterClient:
        if self._cluster is None:
            raise UsageError(explain("task", self._task, "only the chief coordinates training",
                                     "call this on the chief"))
        return self._cluster

    # ---------------------------------------------------------------- roles
    def start_chief(self) -> None:
        """Connect to the ``ps`` tasks and start this chief's session."""
        self._cluster = ClusterClient(self._task, self._addresses("ps"),
                                      self._addresses("worker"), self._auth, self._timeout)
        self._cluster.connect_ps()
        self.intercept_optimizer_steps()
        atexit.register(self._cluster.shutdown)

    def serve(self) -> None:
        """Serve as this ``worker`` or ``ps`` task until the chief finishes."""
        address = self._spec.task_address(self._role, self._task_id)
        chief = "chief:0"
        if self._role == "ps":
            store = VariableStore()
            handlers: dict[str, Callable[[bytes, str], bytes]] = {
                m: partial(store.handle, m) for m in STORE_METHODS}
            # each worker keeps a push stream open (one handler thread), a restarted one
            # a second until the first is found closed; calls need threads too
            threads = 8 + 2 * len(self._addresses("worker"))
            service = TaskService(self._task, address, chief, self._auth, self._timeout,
                                  handlers, STORE_CODE_METHODS, store.reset,
                                  stream_methods=STORE_STREAM_METHODS, threads=threads)
        else:
            ps = [RpcClient(self._task, name, addr, self._auth, self._timeout)
                  for name, addr in self._addresses("ps")]
            strategy = self._strategy
            assert strategy is not None
            self._executor = ClosureExecutor(self._task_id,
                                             VariableClient(ps, True, stream_pushes=True),
                                             self._resolve_special, strategy.scope)
            self.intercept_optimizer_steps()
            service = TaskService(self._task, address, chief, self._auth, self._timeout,
                                  self._executor.handlers(), EXECUTOR_CODE_METHODS,
                                  self._executor.reset, self._executor.incarnation)
        service.serve()

    def _resolve_special(self, ref: tuple[Any, ...]) -> Any:
        if ref[0] == "strategy":
            return self._strategy
        raise UsageError(explain("reference", ref, "is unknown on this worker", "-"))

    # ------------------------------------------------------ variables on ps
    def _setup_module(self, module: nn.Module) -> None:
        if self._role != "chief" or id(module) in self._objects:
            return
        cluster = self._chief()
        named = [*((n, p, True) for n, p in module.named_parameters()),
                 *((n, b, False) for n, b in module.named_buffers())]
        placements: dict[str, VariablePlacement] = {}
        for name, tensor, is_param in named:
            placement = self._placer.place(name, tuple(tensor.shape), tensor.dtype)
            cluster.variables.track(placement, tensor)
            cluster.variables.create(placement, tensor)
            dtype = str(tensor.dtype).removeprefix("torch.")
            self._var_refs[id(tensor)] = ("var", placement, dtype,
                                          (is_param, bool(tensor.requires_grad)))
            placements[name] = placement
        self._module_vars[id(module)] = placements
        self._share(module)

    def variable_placement(self, module: nn.Module) -> dict[str, VariablePlacement]:
        """Where each parameter and buffer of ``module`` lives (name -> shards and ``ps`` tasks).

        Example::

            strategy.extended.variable_placement(net)["0.weight"].tasks    # [0, 1, 0]
        """
        return dict(self._module_vars.get(id(module), {}))

    def _var_ids(self, module: nn.Module) -> list[int]:
        return [p.id for p in self._module_vars.get(id(module), {}).values()]

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if self._cluster is not None and id(module) in self._module_vars:
            self._cluster.variables.pull(self._var_ids(module))
        return dict(module.state_dict())

    def _load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        module.load_state_dict(state)
        if self._cluster is not None and id(module) in self._module_vars:
            variables = self._cluster.variables
            self._cluster.variables.assign({v: variables.local[v] for v in self._var_ids(module)})

    def _optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        state = dict(optimizer.state_dict())
        if self._cluster is None or not self._manages_optimizer(optimizer):
            return state
        params = [p for g in optimizer.param_groups for p in g["params"]]
        # the slots live on the ps tasks (the chief's are unused)
        state["state"] = self._cluster.variables.optimizer_slots(
            self._register_optimizer(optimizer), params)
        return state

    def _load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer,
                                   state: dict[str, Any]) -> None:
        if self._cluster is None or not self._manages_optimizer(optimizer):
            optimizer.load_state_dict(state)
            return
        optimizer.load_state_dict({**state, "state": {}})  # hyper-parameters
        optimizer.state.clear()
        rid = self._register_optimizer(optimizer)
        self.sync_hyperparameters()
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self._cluster.variables.load_optimizer_slots(rid, params, state.get("state", {}))

    def refresh(self) -> None:
        """Copy the current values of every variable (and loss scale) into the chief's objects."""
        if self._cluster is not None:
            self._cluster.joined()
            if self._cluster.variables.placements:
                self._cluster.variables.pull()
            for rid, obj in list(self._objects.values()):
                if isinstance(obj, LossScaleOptimizer) and obj.dynamic:
                    take_loss_scale(obj, self._cluster.variables.loss_scale(rid))

    # ------------------------------------------------------------ optimizers
    def _manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        if self._executor is not None:
            return id(optimizer) in self._executor.resource_ids
        return any(id(p) in self._var_refs for g in optimizer.param_groups for p in g["params"])

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._executor is not None:
            self._executor.push_gradients(optimizer)
            return
        rid = self._register_optimizer(optimizer)
        self.sync_hyperparameters()
        self._chief().variables.push_optimizer(rid, optimizer)

    def _deferred_updates(self) -> AbstractContextManager[None]:
        if self._executor is not None:  # a worker: the push's reply is applied on leaving
            return self._executor.variables.deferring()
        return nullcontext()

    def _register_optimizer(self, optimizer: torch.optim.Optimizer) -> int:
        entry = self._objects.get(id(optimizer))
        if entry is not None:
            return entry[0]
        variables = self._chief().variables
        groups = []
        for group in optimizer.param_groups:
            vids = [vid for p in group["params"] if (vid := variables.variable_id(p)) is not None]
            groups.append((_hyper(group), variables.shard_ids(vids)))
        rid = self._new_id()
        variables.send_code("SetOptimizer", {"opt": rid, "cls": type(optimizer),
                                             "groups": groups},
                            timeout=startup_timeout(self._timeout))  # a one-time set-up
        self._hyper[rid] = (optimizer, repr([_hyper(g) for g in optimizer.param_groups]))
        self._share(optimizer, rid)
        return rid

    def sync_hyperparameters(self) -> None:
        """Send hyper-parameters changed on the chief (a new learning rate) to the ``ps`` tasks."""
        for rid, (optimizer, last) in list(self._hyper.items()):
            now = [_hyper(g) for g in optimizer.param_groups]
            if repr(now) != last:
                self._chief().variables.send_code("SetHyper", {"opt": rid, "groups": now})
                self._hyper[rid] = (optimizer, repr(now))

    # ---------------------------------------------- per-worker objects, closures
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _refs(self, obj: Any) -> tuple[Any, ...] | None:
        if obj is self._strategy:
            return ("strategy",)
        key = id(obj)
        if key in self._defining:
            return None
        ref = self._var_refs.get(key)
        if ref is not None:
            return ref
        entry = self._objects.get(key)
        if entry is not None:
            return ("res", entry[0])
        if isinstance(obj, torch.optim.Optimizer) and self._manages_optimizer(obj):
            return ("res", self._register_optimizer(obj))
        if isinstance(obj, LossScaleOptimizer) and obj.dynamic \
                and self._manages_optimizer(obj.inner_optimizer):
            return ("res", self._register_loss_scale(obj))
        return None

    def _register_loss_scale(self, optimizer: LossScaleOptimizer) -> int:
        """Keep ``optimizer``'s dynamic scale on ps:0; each worker's copy reports to it."""
        entry = self._objects.get(id(optimizer))
        if entry is not None:
            return entry[0]
        rid, state = self._new_id(), optimizer.state_dict()
        self._chief().variables.loss_scale(rid).create(
            state["loss_scale"], state["dynamic_counter"], optimizer.dynamic_growth_steps or 1)
        return self._share(optimizer, rid)

    def _shared_loss_scale(self, optimizer: WrappedOptimizer) -> PsLossScale | None:
        if not isinstance(optimizer, LossScaleOptimizer) or not optimizer.dynamic:
            return None
        if self._executor is not None:  # a worker: the chief's wrapper, sent here
            rid = self._executor.resource_ids.get(id(optimizer))
            return None if rid is None else self._executor.variables.loss_scale(rid)
        if self._cluster is None or not self._manages_optimizer(optimizer.inner_optimizer):
            return None
        return self._chief().variables.loss_scale(self._register_loss_scale(optimizer))

    def _share(self, obj: Any, rid: int | None = None) -> int:
        """Send ``obj`` by value to every worker; later messages refer to the workers' copy."""
        rid = self._new_id() if rid is None else rid
        self._defining.add(id(obj))
        try:
            self._chief().add_per_worker(rid, _identity, (obj,), self._refs)
        finally:
            self._defining.discard(id(obj))
        self._objects[id(obj)] = (rid, obj)
        return rid

    def create_per_worker(self, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> int:
        """Make ``fn(*args)`` on every worker (again on a restarted one); returns its id."""
        rid = self._new_id()
        self._chief().add_per_worker(rid, fn, args, self._refs)
        return rid

    def refer(self, obj: Any, rid: int) -> None:
        """Send ``obj`` to workers as a reference to their per-worker object ``rid``."""
        self._objects[id(obj)] = (rid, obj)

    def pack_closure(self, fn: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> bytes:
        """``fn`` and its arguments, ready to run on any worker.

        Metric objects the function uses (``distrib.metrics``: it reaches them through
        its arguments or the variables it captures) travel with it; the worker returns
        what the function added to their states, and the chief adds it to its own
        objects (:meth:`run_closures`), so that reading a metric on the chief gives the
        total over every function that ran — TensorFlow reads the metric's variables,
        which every worker updates, on the ``ps`` (``strategies/_ps_metrics.py``).
        """
        self.sync_hyperparameters()
        return self._metrics.pack(fn, args, kwargs, self._refs, pickling.dumps)

    def connect_worker(self, index: int, timeout: float) -> bool:
        """(Re)start the session on worker ``index``; False if it is not reachable."""
        return self._chief().connect_worker(index, timeout)

    def ticket(self, index: int) -> int:
        """Worker ``index``'s next position in dispatch order (see :meth:`run_closures`)."""
        return self._chief().ticket(index)

    def run_closures(self, index: int, closures: list[bytes], seq: int | None = None,
                     timeout: float | None = None) -> list[tuple[bool, Any]]:
        """Run :meth:`pack_closure` results in order on worker ``index``, in one call.

        Returns ``(True, result)`` or ``(False, exception)`` for each closure that ran
        (after a failure the rest do not run). ``seq``, a :meth:`ticket`, makes the
        worker run calls in dispatch order; ``timeout`` bounds each closure (see
        :meth:`ClusterClient.run`).
        """
        outcomes = self._chief().run(index, closures, seq, timeout)
        return [(ok, self._metrics.apply(value) if ok else value) for ok, value in outcomes]

    def check_cluster(self) -> None:
        """Raise the error of a lost ``ps`` task, if any."""
        self._chief().check()

    @property
    def communication_timeout(self) -> float:
        """Seconds any wait on another task may last."""
        return self._timeout

    # ------------------------------------------------------------------ input
    def _distribute_dataset(self, dataset: DatasetT, options: InputOptions | None
                            ) -> DistributedDataset | DatasetT:
        return dataset  # each worker reads the whole dataset (TF: no auto-sharding here)

    def _distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                           options: InputOptions | None
                                           ) -> DistributedDataset | InputT:
        return dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                       num_replicas_in_sync=1))

    def _enter_scope(self) -> None:
        if self._role == "chief":
            super()._enter_scope()

    def _exit_scope(self, agree: bool = True) -> None:
        if self._role == "chief":
            super()._exit_scope(agree)


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


class ParameterServerStrategy(Strategy):
    """Asynchronous data parallelism with parameter servers (``tf.distribute.experimental.ParameterServerStrategy``).

    Args:
        cluster_resolver: where the cluster comes from (default: TF_CONFIG).
        variable_partitioner: shards large variables along dimension 0, e.g.
            ``distrib.FixedShardsPartitioner(2)``; None keeps every variable whole.
        communication_options: a :class:`distrib.CommunicationOptions`; its timeout
            bounds every wait on another task (default 180 s).
    """

    def __init__(self, cluster_resolver: ClusterResolver | None = None,
                 variable_partitioner: Callable[..., Any] | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        if cluster_resolver is not None and not isinstance(cluster_resolver, ClusterResolver):
            raise UsageError(explain("cluster_resolver", cluster_resolver,
                                     "must be a distrib ClusterResolver or None",
                                     "pass e.g. distrib.cluster.TFConfigClusterResolver()"))
        options = checked_options(communication_options)
        resolver = cluster_resolver if cluster_resolver is not None else auto_resolver()
        spec, task_type, task_id = _spec_of(resolver)
        if task_type == "evaluator":
            raise ConfigError(explain(
                "TF_CONFIG task.type", task_type, "an evaluator does not take part in "
                "ParameterServerStrategy training", "on the evaluator, evaluate the "
                "checkpoints the chief writes instead of creating the strategy"))
        ext = ParameterServerStrategyExtended(resolver, spec, task_type, task_id,
                                              variable_partitioner, options, _secret())
        super().__init__(ext)
        self._ps_extended = ext
        if task_type == "chief":
            ext.start_chief()
            return
        ext.serve()
        sys.stdout.flush()
        sys.exit(0)

    @property
    def extended(self) -> ParameterServerStrategyExtended:
        return self._ps_extended

