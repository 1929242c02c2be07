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

import atexit
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from distrib.cluster import ClusterResolver, ClusterSpec
from distrib.cluster.env import require_cluster_secret
from distrib.comm.ops import CommunicationOptions
from distrib.errors import ConfigError, PeerLostError, explain
from distrib.input import InputContext
from distrib.mixed_precision import LossScaleOptimizer
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.coordination import ClusterClient
from distrib.rpc.placement import Placer
from distrib.rpc.transport import RpcClient, startup_timeout
from distrib.rpc.variables import VariableClient
from distrib.strategies._processes import checked_options
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import OptimizerT

__all__ = ["BetweenGraphStrategy", "BetweenGraphExtended", "CHIEF", "secret"]

_log = logging.getLogger("distrib.estimator")
CHIEF = "chief:0"
_CHIEF_SILENT_SECS = 3.0  # heartbeats missed before a vanished ps is blamed on the chief


def secret() -> str:
    """The cluster's shared secret (every task of a ps cluster must hold it)."""
    return require_cluster_secret("parameter-server training sends variables, gradients "
                                  "and the optimizer between the tasks")


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
        self._ps = [(f"ps:{i}", spec.task_address("ps", i)) for i in range(spec.num_tasks("ps"))]
        self._workers = [f"worker:{i}" for i in range(spec.num_tasks("worker"))] \
            if "worker" in spec.jobs else []
        self._modules: list[nn.Module] = []         # set up, in setup order
        self._module_ids: set[int] = set()
        self._set_up_optimizers: list[torch.optim.Optimizer] = []
        self._cluster: ClusterClient | None = None
        self._clients: list[RpcClient] = []
        self.variables: VariableClient | None = None
        self._optimizers: dict[int, tuple[int, torch.optim.Optimizer]] = {}  # on the ps
        self._hyper: dict[int, str] = {}
        self._active = False
        self._chief_silent = 0.0
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
        return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(len(self._ps)))

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

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        variables = self.variables
        assert variables is not None
        rid = self._optimizers[id(optimizer)][0]
        with self._blame():
            self._send_hyper(rid, optimizer)
            # The ps applies the gradients and answers with the new values; the local step
            # then finds no gradient left and changes nothing.
            variables.push_optimizer(rid, optimizer)

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if self._active:
            with self._blame():
                self._pull_module(module)
        return dict(module.state_dict())

    def _load_module_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        module.load_state_dict(state)
        variables = self.variables
        if self._active and variables is not None:
            ids = self._variable_ids(module)
            if ids:
                with self._blame():
                    variables.assign({v: variables.local[v] for v in ids})

    def _optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        entry = self._optimizers.get(id(optimizer))
        if self._active and entry is not None:
            with self._blame():
                self._pull_slots(entry[0], optimizer)
        return dict(optimizer.state_dict())

    def _load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer,
                                   state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)
        entry = self._optimizers.get(id(optimizer))
        if self._active and entry is not None:
            with self._blame():
                self._send_hyper(entry[0], optimizer)
                self._push_slots(entry[0], optimizer)

    def _distribute_dataset(self, dataset: Any, options: Any) -> Any:
        return dataset  # every task reads its own input (shard it by task to split it)

    def _distribute_datasets_from_function(self, dataset_fn: Callable[..., Any],
                                           options: Any) -> Any:
        return dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                       num_replicas_in_sync=1))

    # ------------------------------------------------------------ connection
    def _connect(self) -> list[RpcClient]:
        if self._clients:
            return self._clients
        auth = Authenticator(secret())
        if self.is_chief:
            self._cluster = ClusterClient(self.task, self._ps, [], auth, self.timeout)
            self._cluster.connect_ps()  # waits for every ps; heartbeats from now on
            atexit.register(self.shutdown)
            self._clients = list(self._cluster.ps)
            return self._clients
        clients = [RpcClient(self.task, name, address, auth, self.timeout)
                   for name, address in self._ps]
        for client in clients:
            client.ensure_ready(startup_timeout(self.timeout), "start every task of the "
                                "cluster, with the addresses TF_CONFIG gives them")
        self._clients = clients
        return clients

    def _call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = wire.decode(self._clients[0].call(method, wire.encode(request)))
        self._chief_silent = float(reply.get("chief_silent", 0.0))
        if reply.get("failed"):
            raise PeerLostError(f"Lost task {CHIEF}: it failed ({reply['failed']}), so "
                                f"{self.task} stops training.", lost=[CHIEF])
        if not self.is_chief and self._chief_silent > self.timeout:
            raise self._chief_lost()
        return reply

    def _chief_lost(self) -> PeerLostError:
        return PeerLostError(
            f"Lost task {CHIEF}: ps:0 had no heartbeat from it for {self._chief_silent:.0f} s "
            f"(communication timeout {self.timeout:.0f} s), so {self.task} stops training. "
            "Fix: restart the chief and every task; training resumes from the chief's latest "
            "checkpoint.", lost=[CHIEF])

    @contextmanager
    def _blame(self) -> Iterator[None]:
        """A worker names the chief when a ps vanished after the chief went silent."""
        try:
            yield
        except PeerLostError as exc:
            if self.is_chief or CHIEF in exc.lost or self._chief_silent < _CHIEF_SILENT_SECS:
                raise
            raise self._chief_lost() from exc

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

    def start(self, names: Sequence[tuple[str, nn.Module]], step: int) -> tuple[int, bool]:
        """Connect, place the variables and agree with the chief.

        ``names``: what to call the modules (their variables are ``<name>/<key>``), in
        placement order; modules set up but not named follow.  ``step``: the chief's
        global step (restored from its checkpoint).  The chief creates the variables with
        its values, re-creates its optimizers with their slots and publishes the manifest;
        a worker waits for it (at most the start-up allowance) and pulls the values.

        Returns the global step and whether the chief already finished training.

        Raises:
            ConfigError: (a worker) its model differs from the chief's.
            PeerLostError: a ``ps`` task, or (a worker) the chief, did not answer in time.
        """
        clients = self._connect()
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
        with self._blame():
            if self.is_chief:
                for placement, tensor in placements:
                    variables.create(placement, tensor)
                for rid, opt in self._optimizers.values():
                    self._register(rid, opt)
                reply = self._call("EstReady", {"manifest": manifest, "step": step})
            else:
                reply = self._await_chief(manifest)
                variables.pull()
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

    def _await_chief(self, manifest: list[Any]) -> dict[str, Any]:
        allowance = startup_timeout(self.timeout)  # the chief may start late: start-up
        deadline = time.monotonic() + allowance
        waited = False
        while True:
            reply = self._call("EstReady", {})
            if reply["ready"]:
                break
            if time.monotonic() > deadline:
                raise PeerLostError(
                    f"Lost task {CHIEF}: it did not create the variables on the ps tasks "
                    f"within {allowance:.0f} s, so {self.task} cannot train. Fix: start the "
                    "chief (the same program with its TF_CONFIG).", lost=[CHIEF])
            if not waited:
                _log.info("Waiting for model to be ready: the chief creates the variables.")
                waited = True
            time.sleep(0.05)
        if reply["manifest"] != manifest:
            theirs = {m[0]: m[1:] for m in reply["manifest"]}
            ours = {m[0]: m[1:] for m in manifest}
            differ = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
            raise ConfigError(explain(
                f"the model of {self.task}", differ[:8], "every task must build the same "
                "variables (names, shapes, dtypes) and optimizers in model_fn as the chief, "
                "whose values they share on the ps tasks", "run the same program and "
                "model_fn on every task"))
        return reply

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
        variables = self.variables
        assert variables is not None
        slots: dict[int, dict[str, Any]] = {}
        for param, state in opt.state.items():
            vid = variables.variable_id(param)
            if vid is not None and state:
                for shard in variables.placements[vid].shards:
                    slots[shard.id] = dict(state)
        if slots:
            variables.load_optimizer_state(rid, slots)

    def _pull_slots(self, rid: int, opt: torch.optim.Optimizer) -> None:
        variables = self.variables
        assert variables is not None
        shards = variables.optimizer_state(rid)
        for group in opt.param_groups:
            for param in group["params"]:
                vid = variables.variable_id(param)
                state = shards.get(variables.placements[vid].shards[0].id) \
                    if vid is not None else None
                if state is not None:
                    opt.state[param] = {k: v.clone() if isinstance(v, torch.Tensor) else v
                                        for k, v in state.items()}

    # ------------------------------------------------------------------ steps
    def pull(self) -> None:
        """Bring the variables that other tasks changed up to date (before a step)."""
        assert self.variables is not None
        if self._cluster is not None:
            self._cluster.check()
        with self._blame():
            self.variables.pull()

    def advance(self) -> tuple[int, bool]:
        """After a step: send in-place changes, add one to the global step.

        Returns the global step and whether the chief finished training.
        """
        assert self.variables is not None
        with self._blame():
            changes = self.variables.local_changes()
            if changes:
                self.variables.add(changes)
            reply = self._call("EstStep", {"add": 1})
        return int(reply["step"]), bool(reply["finished"])

    def global_step(self) -> int:
        """The global step on ``ps:0``."""
        with self._blame():
            return int(self._call("EstStep", {})["step"])

    def sync_local(self) -> None:
        """Copy the variables and the optimizer slots from the ``ps`` tasks into the objects."""
        variables = self.variables
        if variables is None or not self._active:
            return
        with self._blame():
            variables.pull()
            for rid, opt in self._optimizers.values():
                self._pull_slots(rid, opt)

    # -------------------------------------------------------------------- end
    def finish(self) -> int | None:
        """The loop ended: the chief stops the workers, waits for them and takes the final
        values and slots (returns the global step); a worker reports (returns None)."""
        step = None
        if self.is_chief:
            self._call("EstReady", {"finish": True})
            self._wait_for_workers()
            self.sync_local()
            step = self.global_step()
        else:
            self._call("EstDone", {})
        self._active = False
        return step

    def _wait_for_workers(self) -> None:
        start = time.monotonic()
        while True:
            status = self._call("EstStatus", {})
            pending = [w for w in self._workers if w not in status["done"]]
            silent = {w: status["silent"].get(w, time.monotonic() - start) for w in pending}
            lost = [w for w in pending if silent[w] > self.timeout]
            if len(lost) == len(pending):
                break
            time.sleep(0.05)
        if lost:
            _log.warning("Lost task(s) %s: silent for more than %.0f s at the end of training; "
                         "their unfinished steps are not in the final checkpoint.",
                         ", ".join(lost), self.timeout)

    def abort(self, error: BaseException) -> None:
        """The loop failed on this task: tell the workers (chief) or the chief (worker)."""
        if not self._active or not self._clients:
            return
        self._active = False
        method, request = (("EstReady", {"fail": f"{type(error).__name__}: {error}"[:500]})
                           if self.is_chief else ("EstDone", {}))
        try:
            self._clients[0].call(method, wire.encode(request), timeout=5.0)
        except Exception:  # noqa: BLE001 - ps:0 is gone: nothing to tell
            pass

    def shutdown(self) -> None:
        """(Chief) tell the ``ps`` tasks that training finished: they stop serving."""
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            self._clients = []
            cluster.shutdown()


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
