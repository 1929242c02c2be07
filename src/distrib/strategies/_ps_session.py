"""One ``chief`` or ``worker`` task's session with the ``ps`` tasks of between-graph training.

The connections (the chief's heartbeats through :class:`ClusterClient`; a worker's plain
clients), and the calls to ``ps:0`` that the tasks agree through (served by
``distrib.estimator.parameter_server``): ``EstReady`` (the chief publishes the
variables' manifest, or that it finished or failed; a worker polls for it), ``EstStep``
(the global step), ``EstDone`` / ``EstStatus`` (a worker's loop ended / which ended).
Every reply also says for how long the chief has been silent: a worker stops, naming the
chief, when that passes the timeout, and names the chief rather than a ``ps`` task that
vanished after the chief went silent (:meth:`PsSession.blame`).

Example::

    session = PsSession("worker:0", ps=[("ps:0", "h2:2222")], workers=["worker:0"],
                        timeout=180.0)
    clients = session.connect()
    step = session.call("EstStep", {"add": 1})["step"]
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from distrib.cluster.env import require_cluster_secret
from distrib.errors import ConfigError, PeerLostError, explain
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.coordination import ClusterClient
from distrib.rpc.transport import RpcClient, startup_timeout

__all__ = ["PsSession", "CHIEF", "secret"]

_log = logging.getLogger("distrib.estimator")
CHIEF = "chief:0"
_CHIEF_SILENT_SECS = 3.0  # heartbeats missed before a vanished ps is blamed on the chief


def secret() -> str:
    """The cluster's shared secret (every task of a ps cluster must hold it)."""
    return require_cluster_secret("parameter-server training sends variables, gradients "
                                  "and the optimizer between the tasks")


class PsSession:
    """The link of task ``task`` to the ``ps`` tasks.  See the module docstring.

    Args:
        task: this task (``"chief:0"``, ``"worker:1"``).
        ps: ``(name, address)`` of every ``ps`` task, in order.
        workers: every worker task's name (the chief waits for them at the end).
        timeout: seconds any wait on another task may last.
    """

    def __init__(self, task: str, ps: list[tuple[str, str]], workers: list[str],
                 timeout: float) -> None:
        self.task = task
        self.is_chief = task == CHIEF
        self.ps = ps
        self.workers = workers
        self.timeout = timeout
        self.clients: list[RpcClient] = []
        self._cluster: ClusterClient | None = None
        self._chief_silent = 0.0

    def connect(self) -> list[RpcClient]:
        """A client per ``ps`` task, in order, once every one answers (connects once)."""
        if self.clients:
            return self.clients
        auth = Authenticator(secret())
        if self.is_chief:
            self._cluster = ClusterClient(self.task, self.ps, [], auth, self.timeout)
            self._cluster.connect_ps()  # waits for every ps; heartbeats from now on
            atexit.register(self.shutdown)
            self.clients = list(self._cluster.ps)
            return self.clients
        clients = [RpcClient(self.task, name, address, auth, self.timeout)
                   for name, address in self.ps]
        for client in clients:
            client.ensure_ready(startup_timeout(self.timeout), "start every task of the "
                                "cluster, with the addresses TF_CONFIG gives them")
        self.clients = clients
        return clients

    def check(self) -> None:
        """(Chief) raise the error of a ``ps`` task its heartbeats lost, if any."""
        if self._cluster is not None:
            self._cluster.check()

    def call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """Call ``ps:0``; raises when the chief failed or (on a worker) went silent."""
        reply: dict[str, Any] = wire.decode(self.clients[0].call(method, wire.encode(request)))
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
    def blame(self) -> Iterator[None]:
        """A worker names the chief when a ps vanished after the chief went silent."""
        try:
            yield
        except PeerLostError as exc:
            if self.is_chief or CHIEF in exc.lost or self._chief_silent < _CHIEF_SILENT_SECS:
                raise
            raise self._chief_lost() from exc

    def await_chief(self, manifest: list[Any]) -> dict[str, Any]:
        """(Worker) wait until the chief published the variables; check ``manifest``
        (this task's ``[name, shape, dtype]`` rows) against the chief's."""
        allowance = startup_timeout(self.timeout)  # the chief may start late: start-up
        deadline = time.monotonic() + allowance
        waited = False
        while True:
            reply = self.call("EstReady", {})
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

    def wait_for_workers(self) -> None:
        """(Chief) wait until every worker ended its loop or was silent for the timeout."""
        start = time.monotonic()
        while True:
            status = self.call("EstStatus", {})
            pending = [w for w in self.workers if w not in status["done"]]
            silent = {w: status["silent"].get(w, time.monotonic() - start) for w in pending}
            lost = [w for w in pending if silent[w] > self.timeout]
            if len(lost) == len(pending):
                break
            time.sleep(0.05)
        if lost:
            _log.warning("Lost task(s) %s: silent for more than %.0f s at the end of training; "
                         "their unfinished steps are not in the final checkpoint.",
                         ", ".join(lost), self.timeout)

    def report_failure(self, error: BaseException) -> None:
        """Tell the workers (chief) or the chief (worker) that this task's loop failed."""
        if not self.clients:
            return
        method, request = (("EstReady", {"fail": f"{type(error).__name__}: {error}"[:500]})
                           if self.is_chief else ("EstDone", {}))
        try:
            self.clients[0].call(method, wire.encode(request), timeout=5.0)
        except Exception:  # noqa: BLE001 - ps:0 is gone: nothing to tell
            pass

    def shutdown(self) -> None:
        """(Chief) tell the ``ps`` tasks that training finished: they stop serving."""
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            self.clients = []
            cluster.shutdown()
