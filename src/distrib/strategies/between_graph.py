"""``BetweenGraphStrategy``: TensorFlow 1's between-graph replication, with ``ps`` tasks.

What an Estimator trains with on a cluster with a ``ps`` job and no
``train_distribute`` (TensorFlow 1's ``replica_device_setter``): every ``chief`` and
``worker`` task runs its own training loop, on its own input, against variables that
live on the ``ps`` tasks (distrib's parameter-server runtime, :mod:`distrib.rpc`).  The
global step is placed first, so it lives on ``ps:0``; then each parameter and buffer of
the modules set up goes to the next ``ps`` task, round-robin, whole.

Through the strategy seams:

* module setup (``scope()``): the modules are recorded; :meth:`BetweenGraphExtended.start`
  places their variables;
* optimizer setup: the optimizers are recorded; ``start`` re-creates each on the ``ps``
  tasks (its slots live with the variables) with the slots it holds;
* optimizer steps: ``optimizer.step()`` of a registered optimizer pushes its gradients;
  each ``ps`` applies them at once (no waiting for other tasks) and answers with the new
  values, so the local step finds no gradient left and changes nothing; a changed
  learning rate is sent first;
* state dicts (checkpoints): the values and the optimizer slots are read from the ``ps``
  tasks (and loads written there) while training runs.

The rest of a run are methods the training loop calls: :meth:`~BetweenGraphExtended.start`
(connect; the chief creates the variables and publishes their manifest, a worker waits
for it and checks its model against it), :meth:`~BetweenGraphExtended.pull` before a
step, :meth:`~BetweenGraphExtended.advance` after it (in-place changes such as batch-norm
statistics are added to the ``ps`` copy; the global step on ``ps:0`` advances by one),
:meth:`~BetweenGraphExtended.finish` or :meth:`~BetweenGraphExtended.abort` at the end and
:meth:`~BetweenGraphExtended.shutdown` (the chief: the ``ps`` tasks stop serving).  The
``ps`` side is ``distrib.estimator.parameter_server``.

Losing a ``ps`` task fails the chief's and the workers' next call with an error naming
it; a worker whose ``ps`` vanished after the chief went silent names the chief.

Example (``Estimator.train`` does this on a cluster with ``ps`` tasks)::

    strategy = BetweenGraphStrategy(resolver)          # the task's place in TF_CONFIG
    with strategy.scope():
        net = nn.Linear(4, 1)
    opt = strategy.extended.setup_optimizer(torch.optim.SGD(net.parameters(), lr=0.1))
    step, finished = strategy.extended.start([("linear", net)], step=0)
    strategy.extended.pull(); ...; opt.step(); step, finished = strategy.extended.advance()
    strategy.extended.finish()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from distrib.cluster import ClusterResolver, ClusterSpec
from distrib.comm.ops import CommunicationOptions
from distrib.distribute.group import WrappedOptimizer
from distrib.errors import ConfigError, explain
from distrib.input import DistributedDataset, InputContext, InputOptions
from distrib.mixed_precision import LossScaleOptimizer
from distrib.rpc.loss_scales import PsLossScale
from distrib.rpc.placement import Placer
from distrib.rpc.transport import startup_timeout
from distrib.rpc.variables import VariableClient
from distrib.strategies._optimizer_steps import take_loss_scale
from distrib.strategies._processes import checked_options
from distrib.strategies._ps_session import CHIEF, PsSession, secret
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import DatasetT, InputT, OptimizerT

__all__ = ["BetweenGraphStrategy", "BetweenGraphExtended", "CHIEF", "secret"]


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def _tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters()
    yield from module.named_buffers()


class BetweenGraphExtended(StrategyExtended):
    """One ``chief`` or ``worker`` task's link to the ``ps`` tasks (see the module docstring).

    Args:
        spec: the cluster (with a ``ps`` job).
        task_type: ``"chief"`` or ``"worker"``.
        task_id: the task's index.
        options: the communication options (their timeout bounds every wait).
        resolver: the resolver the cluster came from.
    """

    def __init__(self, spec: ClusterSpec, task_type: str, task_id: int,
                 options: CommunicationOptions, resolver: ClusterResolver | None) -> None:
        super().__init__(None, torch.device("cpu"), ("cpu:0",), wrap=False,
                         cluster_resolver=resolver, options=options)
        self.task = f"{task_type}:{task_id}"
        self.is_chief = task_type == "chief"
        self.timeout = float(options.effective_timeout())
        self._session = PsSession(
            self.task, [(f"ps:{i}", spec.task_address("ps", i))
                        for i in range(spec.num_tasks("ps"))],
            [f"worker:{i}" for i in range(spec.num_tasks("worker"))]
            if "worker" in spec.jobs else [], self.timeout)
        self._modules: list[nn.Module] = []         # set up, in setup order
        self._module_ids: set[int] = set()
        self._set_up_optimizers: list[torch.optim.Optimizer] = []
        self._scales: dict[int, tuple[int, LossScaleOptimizer]] = {}  # dynamic, on ps:0
        self.variables: VariableClient | None = None
        self._optimizers: dict[int, tuple[int, torch.optim.Optimizer]] = {}  # on the ps
        self._hyper: dict[int, str] = {}
        self._active = False
        self.intercept_optimizer_steps()

    # ----------------------------------------------------------------- facts
    @property
    def should_checkpoint(self) -> bool:
        return self.is_chief

    @property
    def should_save_summary(self) -> bool:
        return self.is_chief

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0"
                     for i in range(len(self._session.ps)))

    @property
    def active(self) -> bool:
        """Whether a run is under way (between :meth:`start` and :meth:`finish`/:meth:`abort`)."""
        return self._active

    # ------------------------------------------------------------ the seams
    def _setup_module(self, module: nn.Module) -> None:
        if id(module) not in self._module_ids:  # placed on the ps tasks by start()
            self._module_ids.add(id(module))
            self._modules.append(module)

    def _keeps_in_sync(self, param: torch.Tensor) -> bool:
        return any(p is param for m in self._modules for p in m.parameters())

    def _setup_optimizer(self, optimizer: OptimizerT) -> OptimizerT:
        inner: torch.optim.Optimizer = optimizer.inner_optimizer \
            if isinstance(optimizer, LossScaleOptimizer) else optimizer
        if not any(o is inner for o in self._set_up_optimizers):  # re-made on the ps by start()
            self._set_up_optimizers.append(inner)
        return optimizer

    def _manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        return self._active and id(optimizer) in self._optimizers

    def _shared_loss_scale(self, optimizer: WrappedOptimizer) -> PsLossScale | None:
        entry = self._scales.get(id(optimizer))
        if not self._active or entry is None or self.variables is None:
            return None
        return self.variables.loss_scale(entry[0])

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        variables = self.variables
        assert variables is not None
        rid = self._optimizers[id(optimizer)][0]
        with self._session.blame():
            self._send_hyper(rid, optimizer)
            # The ps applies the gradients and answers with the new values; the local step
            # then finds no gradient left and changes nothing.
            variables.push_optimizer(rid, optimizer)

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if self._active:
            with self._session.blame():
                self._pull_module(module)
        return dict(module.state_dict())

    def _load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        module.load_state_dict(state)
        variables = self.variables
        if self._active and variables is not None:
            ids = self._variable_ids(module)
            if ids:
                with self._session.blame():
                    variables.assign({v: variables.local[v] for v in ids})

    def _optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        entry = self._optimizers.get(id(optimizer))
        if self._active and entry is not None:
            with self._session.blame():
                self._pull_slots(entry[0], optimizer)
        return dict(optimizer.state_dict())

    def _load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer,
                                   state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)
        entry = self._optimizers.get(id(optimizer))
        if self._active and entry is not None:
            with self._session.blame():
                self._send_hyper(entry[0], optimizer)
                self._push_slots(entry[0], optimizer)

    def _distribute_dataset(self, dataset: DatasetT, options: InputOptions | None
                            ) -> DistributedDataset | DatasetT:
        return dataset  # every task reads its own input (shard it by task to split it)

    def _distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], InputT],
                                           options: InputOptions | None
                                           ) -> DistributedDataset | InputT:
        return dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                       num_replicas_in_sync=1))

    # ------------------------------------------------------------------ start
    def _named_variables(self, names: Sequence[tuple[str, nn.Module]]
                         ) -> Iterator[tuple[str, torch.Tensor]]:
        """Every variable of the modules set up, named after ``names`` (the modules holding
        them), the named modules first in their order."""
        prefix: dict[int, str] = {}
        for name, root in names:
            for path, sub in root.named_modules():
                prefix.setdefault(id(sub), f"{name}/{path}." if path else f"{name}/")
        placed = [m for _, m in names]
        placed += [m for m in self._modules if not any(m is p for p in placed)]
        seen: set[int] = set()
        for index, module in enumerate(placed):
            start = prefix.get(id(module), f"module_{index}/")
            for key, tensor in _tensors(module):
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    yield start + key, tensor

    def start(self, names: Sequence[tuple[str, nn.Module]], step: int,
              wrappers: Sequence[LossScaleOptimizer] = ()) -> tuple[int, bool]:
        """Connect, place the variables and agree with the chief.

        ``names``: what to call the modules (their variables are ``<name>/<key>``), in
        placement order; modules set up but not named follow.  ``step``: the chief's
        global step (restored from its checkpoint).  ``wrappers``: loss-scale wrappers of
        the optimizers; a dynamic scale lives on ``ps:0`` for every task.  The chief
        creates the variables with its values, re-creates its optimizers with their slots
        (and its loss scales) and publishes the manifest; a worker waits for it (at most
        the start-up allowance) and pulls the values.

        Returns the global step and whether the chief already finished training.

        Raises:
            ConfigError: (a worker) its model differs from the chief's.
            PeerLostError: a ``ps`` task, or (a worker) the chief, did not answer in time.
        """
        clients = self._session.connect()
        variables = self.variables = VariableClient(clients, track_changes=True)
        placer = Placer(len(clients))
        placer.place("global_step", (), torch.int64)  # TF creates it first: on ps:0
        manifest: list[Any] = []
        placements = []
        for name, tensor in self._named_variables(names):
            placement = placer.place(name, tuple(tensor.shape), tensor.dtype)
            variables.track(placement, tensor)
            placements.append((placement, tensor))
            manifest.append([name, list(tensor.shape), str(tensor.dtype)])
        optimizers = self._set_up_optimizers
        manifest.append(["optimizers", [type(o).__name__ for o in optimizers]])
        self._optimizers = {id(o): (i + 1, o) for i, o in enumerate(optimizers)}
        dynamic = [w for w in wrappers if w.dynamic]
        manifest.append(["loss_scales", len(dynamic)])
        self._scales = {id(w): (i + 1, w) for i, w in enumerate(dynamic)}
        with self._session.blame():
            if self.is_chief:
                for placement, tensor in placements:
                    variables.create(placement, tensor)
                for rid, opt in self._optimizers.values():
                    self._register(rid, opt)
                for sid, wrapper in self._scales.values():  # the chief's (restored) values
                    state, shared = wrapper.state_dict(), variables.loss_scale(sid)
                    shared.create(state["loss_scale"], state["dynamic_counter"],
                                  wrapper.dynamic_growth_steps or 1)
                    shared.assign(state["loss_scale"], state["dynamic_counter"])
                reply = self._session.call("EstReady", {"manifest": manifest, "step": step})
            else:
                reply = self._session.await_chief(manifest)
                variables.pull()
                self._take_loss_scales()
        self._active = True
        return int(reply["step"]), bool(reply["finished"])

    def _register(self, rid: int, opt: torch.optim.Optimizer) -> None:
        variables = self.variables
        assert variables is not None
        groups = []
        for group in opt.param_groups:
            vids = [v for p in group["params"] if (v := variables.variable_id(p)) is not None]
            groups.append((_hyper(group), variables.shard_ids(vids)))
        # a ps builds its first optimizer slowly (torch imports more): set-up, not steady state
        variables.send_code("SetOptimizer", {"opt": rid, "cls": type(opt), "groups": groups},
                            timeout=startup_timeout(self.timeout))
        self._hyper[rid] = repr([_hyper(g) for g in opt.param_groups])
        self._push_slots(rid, opt)  # restored from the checkpoint

    # ------------------------------------------------------- values and slots
    def _variable_ids(self, module: nn.Module) -> list[int]:
        variables = self.variables
        if variables is None:
            return []
        return [v for _, t in _tensors(module) if (v := variables.variable_id(t)) is not None]

    def _pull_module(self, module: nn.Module) -> None:
        ids = self._variable_ids(module)
        if ids and self.variables is not None:
            self.variables.pull(ids)

    def _send_hyper(self, rid: int, opt: torch.optim.Optimizer) -> None:
        """Send a changed learning rate (any hyper-parameter) to the ps optimizer."""
        assert self.variables is not None
        groups = [_hyper(g) for g in opt.param_groups]
        if repr(groups) != self._hyper.get(rid):
            self.variables.send_code("SetHyper", {"opt": rid, "groups": groups})
            self._hyper[rid] = repr(groups)

    def _push_slots(self, rid: int, opt: torch.optim.Optimizer) -> None:
        assert self.variables is not None
        params = [p for g in opt.param_groups for p in g["params"]]
        slots = {i: dict(opt.state[p]) for i, p in enumerate(params) if opt.state.get(p)}
        self.variables.load_optimizer_slots(rid, params, slots)

    def _pull_slots(self, rid: int, opt: torch.optim.Optimizer) -> None:
        assert self.variables is not None
        params = [p for g in opt.param_groups for p in g["params"]]
        for index, state in self.variables.optimizer_slots(rid, params).items():
            opt.state[params[index]] = {k: v.clone() if isinstance(v, torch.Tensor) else v
                                        for k, v in state.items()}

    # ------------------------------------------------------------------ steps
    def pull(self) -> None:
        """Bring the variables that other tasks changed up to date (before a step)."""
        assert self.variables is not None
        self._session.check()
        with self._session.blame():
            self.variables.pull()

    def advance(self) -> tuple[int, bool]:
        """After a step: send in-place changes, add one to the global step.

        Returns the global step and whether the chief finished training.
        """
        assert self.variables is not None
        with self._session.blame():
            changes = self.variables.local_changes()
            if changes:
                self.variables.add(changes)
            reply = self._session.call("EstStep", {"add": 1})
        return int(reply["step"]), bool(reply["finished"])

    def global_step(self) -> int:
        """The global step on ``ps:0``."""
        with self._session.blame():
            return int(self._session.call("EstStep", {})["step"])

    def sync_local(self) -> None:
        """Copy the variables and the optimizer slots from the ``ps`` tasks into the objects."""
        variables = self.variables
        if variables is None or not self._active:
            return
        with self._session.blame():
            variables.pull()
            for rid, opt in self._optimizers.values():
                self._pull_slots(rid, opt)
            self._take_loss_scales()

    def _take_loss_scales(self) -> None:
        """Copy the loss scales on ``ps:0`` into this task's wrappers."""
        assert self.variables is not None
        for sid, wrapper in self._scales.values():
            take_loss_scale(wrapper, self.variables.loss_scale(sid))

    # -------------------------------------------------------------------- end
    def finish(self) -> int | None:
        """The loop ended: the chief stops the workers, waits for them and takes the final
        values and slots (returns the global step); a worker reports (returns None)."""
        step = None
        if self.is_chief:
            self._session.call("EstReady", {"finish": True})
            self._session.wait_for_workers()
            self.sync_local()
            step = self.global_step()
        else:
            self._session.call("EstDone", {})
        self._active = False
        return step

    def abort(self, error: BaseException) -> None:
        """The loop failed on this task: tell the workers (chief) or the chief (worker)."""
        if self._active:
            self._active = False
            self._session.report_failure(error)

    def shutdown(self) -> None:
        """(Chief) tell the ``ps`` tasks that training finished: they stop serving."""
        self._session.shutdown()


class BetweenGraphStrategy(Strategy):
    """One ``chief`` or ``worker`` task of between-graph training against ``ps`` tasks.

    What the Estimator uses on a cluster with a ``ps`` job and no ``train_distribute``;
    nothing connects until :meth:`BetweenGraphExtended.start`.

    Args:
        cluster_resolver: the cluster and this task's place in it (a ``chief`` or
            ``worker`` task of a cluster with a ``ps`` job).
        communication_options: its timeout bounds every wait on another task
            (default 180 s).

    Raises:
        ConfigError: no ``ps`` job, or this task is not a ``chief`` or ``worker``.
    """

    def __init__(self, cluster_resolver: ClusterResolver,
                 communication_options: CommunicationOptions | None = None) -> None:
        spec = cluster_resolver.cluster_spec()
        task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
        if "ps" not in spec.jobs or task_type not in ("chief", "worker") or task_id is None:
            raise ConfigError(explain(
                "cluster", {"cluster": spec.as_dict(), "task": [task_type, task_id]},
                "between-graph training runs on the chief and worker tasks of a cluster "
                "with a 'ps' job", "add a 'ps' job to TF_CONFIG's cluster, and run the "
                "training on the chief and the workers only"))
        options = checked_options(communication_options)
        ext = BetweenGraphExtended(spec, str(task_type), int(task_id), options,
                                   cluster_resolver)
        super().__init__(ext)
        self._between_graph = ext

    @property
    def extended(self) -> BetweenGraphExtended:
        return self._between_graph
