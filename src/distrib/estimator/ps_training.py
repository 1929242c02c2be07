"""The chief's and the workers' side of Estimator training with ``ps`` tasks.

TensorFlow 1's between-graph replication (``replica_device_setter``), on distrib's
parameter-server runtime (:mod:`distrib.rpc`): the global step is placed first, so it
lives on ``ps:0``, then each module parameter and buffer ``model_fn`` made goes to the
next ``ps`` task, round-robin.  Every chief and worker task runs its own loop:

* start: the chief restores its checkpoint (or initialises), creates the variables on
  the ``ps`` tasks with those values, re-creates each optimizer there (its slots live
  with the variables), sets the global step and publishes the variables' manifest; a
  worker builds the same objects from its first batch, waits for the manifest
  (``Waiting for model to be ready``), checks that its model matches and pulls;
* each step: pull the variables that changed; ``model_fn`` and the loss's gradients on
  this task's own batch; ``optimizer.step()`` pushes the gradients, which the ``ps``
  applies at once (no waiting for other tasks); in-place changes (batch-norm
  statistics) are added to the ``ps`` copy; the global step on ``ps:0`` advances by one,
  so ``max_steps`` counts every task's steps;
* end: the chief tells the workers to stop after their current step, waits for them
  (a worker silent for the timeout is reported lost and not waited for), pulls the
  variables and the optimizer slots and writes the final checkpoint.

Losing a ``ps`` task fails the chief's and the workers' next call with an error naming
it; losing the chief stops the ``ps`` tasks after the timeout, and the workers report
``Lost task chief:0``.

Example (``Estimator.train`` does this on a cluster with ``ps`` tasks)::

    remote = PsTraining(config)
    finished = remote.start(runtime)      # after model_fn built the objects
    remote.pull(); ...; step, finished = remote.advance()
    remote.finish(runtime)
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from distrib.errors import ConfigError, PeerLostError, explain
from distrib.estimator.parameter_server import CHIEF, secret, timeout_of
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.coordination import ClusterClient
from distrib.rpc.placement import Placer
from distrib.rpc.transport import RpcClient, startup_timeout
from distrib.rpc.variables import VariableClient

__all__ = ["PsTraining", "uses_ps"]

_log = logging.getLogger("distrib.estimator")
_CHIEF_SILENT_SECS = 3.0  # heartbeats missed before a vanished ps is blamed on the chief


def uses_ps(config: Any) -> bool:
    """Whether this task trains against ``ps`` tasks (a ``ps`` job, no ``train_distribute``)."""
    return (config.train_distribute is None and config.num_ps_replicas > 0
            and config.task_type in ("chief", "worker"))


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


class PsTraining:
    """One chief or worker task's link to the ``ps`` tasks.  See the module docstring.

    Args:
        config: the Estimator's :class:`~distrib.estimator.RunConfig`.
    """

    def __init__(self, config: Any) -> None:
        spec = config.cluster_spec
        self.task = f"{config.task_type}:{config.task_id}"
        self.is_chief = config.task_type == "chief"
        self.timeout = timeout_of(config)
        self._ps = [(f"ps:{i}", spec.task_address("ps", i)) for i in range(spec.num_tasks("ps"))]
        self._workers = [f"worker:{i}" for i in range(spec.num_tasks("worker"))] \
            if "worker" in spec.jobs else []
        self._auth = Authenticator(secret())
        self._cluster: ClusterClient | None = None
        self._clients: list[RpcClient] = []
        self.variables: VariableClient | None = None
        self._optimizers: dict[int, tuple[int, torch.optim.Optimizer]] = {}
        self._hooked: set[int] = set()
        self._hyper: dict[int, str] = {}
        self._active = False
        self._chief_silent = 0.0

    # ------------------------------------------------------------ connection
    def _connect(self) -> list[RpcClient]:
        if self._clients:
            return self._clients
        if self.is_chief:
            self._cluster = ClusterClient(self.task, self._ps, [], self._auth, self.timeout)
            self._cluster.connect_ps()  # waits for every ps; heartbeats from now on
            atexit.register(self.shutdown)
            self._clients = list(self._cluster.ps)
            return self._clients
        clients = [RpcClient(self.task, name, address, self._auth, self.timeout)
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
    def _variables(self, runtime: Any) -> Iterator[tuple[str, torch.Tensor]]:
        for name, obj in runtime.store.trackable().items():
            if isinstance(obj, nn.Module):
                for key, param in obj.named_parameters():
                    yield f"{name}/{key}", param
                for key, buffer in obj.named_buffers():
                    yield f"{name}/{key}", buffer

    def start(self, runtime: Any) -> bool:
        """Connect, place the variables and agree with the chief; returns whether training ended."""
        clients = self._connect()
        variables = self.variables = VariableClient(clients, track_changes=True)
        placer = Placer(len(clients))
        placer.place("global_step", (), torch.int64)  # TF creates it first: on ps:0
        manifest: list[Any] = []
        placements = []
        for name, tensor in self._variables(runtime):
            placement = placer.place(name, tuple(tensor.shape), tensor.dtype)
            variables.track(placement, tensor)
            placements.append((placement, tensor))
            manifest.append([name, list(tensor.shape), str(tensor.dtype)])
        optimizers = runtime.store.of_type(torch.optim.Optimizer)
        manifest.append(["optimizers", [type(o).__name__ for o in optimizers]])
        self._optimizers = {id(o): (i + 1, o) for i, o in enumerate(optimizers)}
        with self._blame():
            if self.is_chief:
                for placement, tensor in placements:
                    variables.create(placement, tensor)
                for rid, opt in self._optimizers.values():
                    self._register(rid, opt)
                reply = self._call("EstReady", {"manifest": manifest, "step": runtime.step})
            else:
                reply = self._await_chief(manifest)
                variables.pull()
                runtime.step = int(reply["step"])
        for _, opt in self._optimizers.values():
            if id(opt) not in self._hooked:
                opt.register_step_pre_hook(self._before_optimizer_step)
                self._hooked.add(id(opt))
        self._active = True
        return bool(reply["finished"])

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
        slots: dict[int, dict[str, Any]] = {}
        for param, state in opt.state.items():  # restored from the checkpoint
            vid = variables.variable_id(param)
            if vid is not None and state:
                for shard in variables.placements[vid].shards:
                    slots[shard.id] = dict(state)
        if slots:
            variables.load_optimizer_state(rid, slots)

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

    # ------------------------------------------------------------------ steps
    def _before_optimizer_step(self, opt: torch.optim.Optimizer, args: Any,
                               kwargs: Any) -> None:
        entry = self._optimizers.get(id(opt))
        if not self._active or entry is None or self.variables is None:
            return
        rid = entry[0]
        hyper = repr([_hyper(g) for g in opt.param_groups])
        with self._blame():
            if hyper != self._hyper.get(rid):  # a new learning rate: the ps applies it
                self.variables.send_code("SetHyper", {"opt": rid, "groups": [
                    _hyper(g) for g in opt.param_groups]})
                self._hyper[rid] = hyper
            # The ps applies the gradients and answers with the new values; the local step
            # then finds no gradient left and changes nothing.
            self.variables.push_optimizer(rid, opt)

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

    # -------------------------------------------------------------------- end
    def sync_local(self, runtime: Any) -> None:
        """Copy the variables and the optimizer slots from the ``ps`` tasks into the objects."""
        variables = self.variables
        if variables is None or not self._active:
            return
        with self._blame():
            variables.pull()
            for rid, opt in self._optimizers.values():
                shards = variables.optimizer_state(rid)
                for group in opt.param_groups:
                    for param in group["params"]:
                        vid = variables.variable_id(param)
                        state = shards.get(variables.placements[vid].shards[0].id) \
                            if vid is not None else None
                        if state is not None:
                            opt.state[param] = {k: v.clone() if isinstance(v, torch.Tensor)
                                                else v for k, v in state.items()}
        runtime.step = int(self._call("EstStep", {})["step"])

    def finish(self, runtime: Any) -> None:
        """The loop ended: the chief stops the workers and waits for them; a worker reports."""
        if self.is_chief:
            self._call("EstReady", {"finish": True})
            self._wait_for_workers()
            self.sync_local(runtime)
        else:
            self._call("EstDone", {})
        self._active = False

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
