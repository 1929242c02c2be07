"""``ps`` tasks of an Estimator cluster: the variables, the optimizer and the global step.

With a ``ps`` job in TF_CONFIG and ``RunConfig(train_distribute=None)``, Estimators
train as TensorFlow 1 did with ``replica_device_setter`` (between-graph replication):
each ``ps`` task holds its share of the variables (round-robin per variable) and the
optimizer that updates them; the chief and every worker run their own training loop
against them through :class:`~distrib.strategies.between_graph.BetweenGraphStrategy`
(see :mod:`distrib.estimator.ps_training`), which calls the methods below.  A ``ps`` task runs
:func:`serve` (``train_and_evaluate`` calls it) until the chief finishes.

``ps:0`` also holds the global step and what the tasks agree on, through these calls
(besides the variable store's ``Pull``/``Push``/``Add``/...):

``EstReady``
    the chief publishes the variables' manifest once it has created them (a worker
    polls until then, and checks its own model against it);
``EstStep``
    read, add to or set the global step; the reply also says whether the chief
    finished, and for how long the chief has been silent;
``EstDone`` / ``EstStatus``
    a worker's loop ended / which workers ended and when each was last heard of.

The chief's ``EstReady`` also says when it finished (the workers stop after their
current step) or failed (the workers stop with an error naming it).

A new chief session (a restarted chief) clears all of it, as it clears the variables.

Example (on a ``ps`` task; ``train_and_evaluate`` does this)::

    serve(estimator)        # returns when the chief says training finished
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

from distrib.comm import CommunicationOptions
from distrib.errors import ConfigError, explain
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.service import TaskService
from distrib.rpc.transport import Handler
from distrib.rpc.variables import STORE_CODE_METHODS, STORE_METHODS, VariableStore
from distrib.strategies.between_graph import CHIEF, secret

__all__ = ["serve", "PsState", "secret", "timeout_of", "CHIEF"]

_log = logging.getLogger("distrib.estimator")


def timeout_of(config: Any) -> float:
    """Seconds any wait on another task may last (``RunConfig(communication_options=...)``)."""
    options = config.communication_options or CommunicationOptions()
    return float(options.effective_timeout())


class PsState:
    """What ``ps:0`` keeps besides the variables: the global step and the run's agreements."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.service: TaskService | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the previous chief session."""
        self.step = 0
        self.manifest: Any = None
        self.finished = False
        self.failed: str | None = None
        self.done: set[str] = set()
        self.seen: dict[str, float] = {}

    def _silence(self) -> float:
        return self.service.seconds_since_contact() if self.service is not None else 0.0

    def _reply(self) -> dict[str, Any]:
        return {"step": self.step, "ready": self.manifest is not None,
                "finished": self.finished, "failed": self.failed,
                "chief_silent": self._silence()}

    def step_call(self, body: bytes, caller: str) -> bytes:
        request = wire.decode(body)
        with self._lock:
            if "set" in request:
                self.step = int(request["set"])
            self.step += int(request.get("add", 0))
            return wire.encode(self._reply())

    def ready_call(self, body: bytes, caller: str) -> bytes:
        request = wire.decode(body)
        with self._lock:
            if "manifest" in request:   # the chief publishes; a new run starts
                self.manifest = request["manifest"]
                self.step = int(request["step"])
                self.finished = False
                self.done.clear()
            if request.get("finish"):
                self.finished = True
            if request.get("fail"):
                self.failed = str(request["fail"])
            return wire.encode({**self._reply(), "manifest": self.manifest})

    def done_call(self, body: bytes, caller: str) -> bytes:
        with self._lock:
            self.done.add(caller)
            return wire.encode({})

    def status_call(self, body: bytes, caller: str) -> bytes:
        now = time.monotonic()
        with self._lock:
            return wire.encode({"done": sorted(self.done),
                                "silent": {t: now - s for t, s in self.seen.items()}})

    def handlers(self) -> dict[str, Handler]:
        """``EstReady``, ``EstStep``, ``EstDone`` and ``EstStatus``."""
        return {"EstReady": self.ready_call, "EstStep": self.step_call,
                "EstDone": self.done_call, "EstStatus": self.status_call}

    def seen_by(self, handler: Handler) -> Handler:
        """``handler``, recording when each caller was last heard of."""
        def call(body: bytes, caller: str) -> bytes:
            self.seen[caller] = time.monotonic()
            return handler(body, caller)
        return call


def serve(estimator: Any) -> None:
    """Serve this ``ps`` task's variables until the chief finishes (TF's ``server.join()``).

    Raises:
        PeerLostError: the chief did not connect, or went silent, for the timeout.
    """
    config = estimator.config
    if config.train_distribute is not None:
        raise ConfigError(explain(
            "RunConfig(train_distribute=...)", type(config.train_distribute).__name__,
            "a cluster with a 'ps' job trains asynchronously: every chief and worker task "
            "runs its own loop against the variables on the ps tasks (TensorFlow 1's "
            "replica_device_setter), so no train_distribute strategy applies",
            "pass RunConfig(train_distribute=None) on every task"))
    task = f"ps:{config.task_id}"
    address = config.cluster_spec.task_address("ps", config.task_id)
    store, state = VariableStore(), PsState()
    handlers: dict[str, Handler] = {m: state.seen_by(partial(store.handle, m))
                                    for m in STORE_METHODS}
    handlers.update({m: state.seen_by(h) for m, h in state.handlers().items()})

    def new_session() -> None:
        store.reset()
        state.reset()

    service = TaskService(task, address, CHIEF, Authenticator(secret()), timeout_of(config),
                          handlers, STORE_CODE_METHODS, new_session)
    state.service = service
    _log.info("%s serves the variables of the Estimator at %s until the chief finishes.",
              task, address)
    service.serve()
    _log.info("%s: the chief finished; stopping.", task)
