"""The worker side of a parameter-server cluster: install per-worker objects, run closures.

Both carry the worker's *incarnation* as the chief knows it: a worker that restarted
since (a new process at the same address, without the objects) answers
``{"restarted": true}`` instead, and the chief sends it everything again.

A worker holds what the chief sends it, in order: modules (their parameters become
local tensors that track the variables on the ``ps`` tasks), optimizers, per-worker
datasets and iterators, functions.  Two methods carry code and are therefore
authenticated over their whole body; ``Status`` carries data:

``Install``
    ``{"rid", "fn", "args"}``: run ``fn(*args)`` once and keep the result as
    per-worker object ``rid`` (a restarted worker gets them all again, so its
    iterators start from the beginning, as in TensorFlow);
``Run``
    ``{"blobs": [closure, ...]}``, each closure ``{"fn", "args", "kwargs"}``, run in
    order: pull the variables that changed (unless the previous closure's push already
    brought them back, see :meth:`ClosureExecutor._refresh`), run the function
    (``optimizer.step()`` pushes gradients), add what it changed in place to the
    variables (running statistics, ``add_``).  Answers ``{"ok": [outcome, ...]}``, each
    ``{"ok": result}`` or ``{"error": {...}}`` with the exception's type, message,
    traceback and the tasks it found lost; after a failure the rest do not run (the
    list is shorter; ``sys.exit()`` in a function is its error too: the worker serves
    on).  One closure runs at a time.  With the chief's ``deadline`` (the
    coordinator's closure timeout, per closure): while a closure runs past it, new calls
    are answered ``{"busy": {...}}`` at once (the chief sends them elsewhere), and a
    call that waited past it is answered ``{"expired": true}`` without running;
``Status``
    data: ``{"running": {"seq", "part", "fn", "seconds"}}`` of the closure running now
    (``part``: its place in its call's list), or None.

Example::

    executor = ClosureExecutor(0, variables, resolve_special=..., context=strategy.scope)
    service = TaskService("worker:0", ..., handlers=executor.handlers())
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from distrib.errors import PeerLostError, UsageError, explain
from distrib.rpc import pickling, wire
from distrib.rpc.placement import VariablePlacement
from distrib.rpc.transport import Handler
from distrib.rpc.variables import VariableClient

__all__ = ["ClosureExecutor", "EXECUTOR_CODE_METHODS", "current_worker_index"]

EXECUTOR_CODE_METHODS = frozenset({"Install", "Run"})
_ORDER_WAIT_SECONDS = 5.0
_current = threading.local()


def current_worker_index() -> int | None:
    """The index of the worker running the current closure (None elsewhere).

    Example::

        def dataset_fn():
            i = current_worker_index()     # 0 or 1 on a cluster with two workers
    """
    index = getattr(_current, "index", None)
    return None if index is None else int(index)


def error_info(exc: BaseException) -> dict[str, Any]:
    """How an exception travels back to the chief."""
    return {"type": type(exc).__name__, "module": type(exc).__module__,
            "message": str(exc), "traceback": traceback.format_exc(),
            "lost": list(exc.lost) if isinstance(exc, PeerLostError) else []}


class ClosureExecutor:
    """Runs the chief's closures on one worker.

    Args:
        worker_index: this worker's index (``worker:i``).
        variables: the client that keeps local parameters equal to the ``ps`` variables.
        resolve_special: resolves references other than variables and per-worker
            objects (the strategy itself).
        context: the context each closure runs in (the strategy's scope).
    """

    def __init__(self, worker_index: int, variables: VariableClient,
                 resolve_special: Callable[[tuple[Any, ...]], Any],
                 context: Callable[[], AbstractContextManager[Any]]) -> None:
        self.worker_index = worker_index
        self.variables = variables
        self._special = resolve_special
        self._context = context
        self._lock = threading.Lock()
        self._order = threading.Condition()
        self._next_seq = 0
        self._generation: Any = None
        self._sessions = 0
        #: (seq, part, function name, start, deadline) of the closure running now
        self._running: tuple[int | None, int, str, float, float | None] | None = None
        self.incarnation = uuid.uuid4().hex
        self.resources: dict[int, Any] = {}
        self.resource_ids: dict[int, int] = {}  # id(per-worker object) -> its id

    def handlers(self) -> dict[str, Handler]:
        """The worker's RPC methods."""
        return {"Install": self._install, "Run": self._run, "Status": self._status}

    def _status(self, body: bytes, caller: str) -> bytes:
        """The closure running now: ``{"running": {"seq", "part", "fn", "seconds"} or None}``."""
        running = self._running
        if running is None:
            return wire.encode({"running": None})
        seq, part, fn, since, _ = running
        return wire.encode({"running": {"seq": seq, "part": part, "fn": fn,
                                        "seconds": time.monotonic() - since}})

    def _overdue(self) -> dict[str, Any] | None:
        """The running closure, if it has run past the deadline the chief gave it."""
        running = self._running
        if running is None:
            return None
        seq, _, fn, since, deadline = running
        seconds = time.monotonic() - since
        late = deadline is not None and seconds > deadline
        return {"seq": seq, "fn": fn, "seconds": seconds} if late else None

    def reset(self) -> None:
        """Forget every object of the previous chief session."""
        with self._lock:
            self._sessions += 1  # closures of the previous session still waiting: not run
            self.resources.clear()
            self.resource_ids.clear()
            self.variables.forget()
        with self._order:
            self._next_seq = 0

    # ----------------------------------------------------------- references
    def _resolve(self, ref: tuple[Any, ...]) -> Any:
        kind = ref[0]
        if kind == "var":
            return self._variable(ref[1], ref[2], ref[3])
        if kind == "res":
            if ref[1] not in self.resources:
                raise UsageError(explain("per-worker object", ref[1], "was not installed on "
                                         f"worker:{self.worker_index}", "report this as a bug"))
            return self.resources[ref[1]]
        return self._special(ref)

    def _variable(self, placement: VariablePlacement, dtype: str, kind: tuple[bool, bool]
                  ) -> torch.Tensor:
        local = self.variables.local.get(placement.id)
        if local is not None:
            return local
        is_param, requires_grad = kind
        t = torch.empty(placement.shape, dtype=wire.TORCH_DTYPES[dtype])
        tensor: torch.Tensor = torch.nn.Parameter(t, requires_grad=requires_grad) \
            if is_param else t
        self.variables.track(placement, tensor)
        return tensor

    # -------------------------------------------------------------- methods
    def _wait_turn(self, seq: int | None) -> None:
        """Closures dispatched together run in dispatch order (a missing one is waited for briefly)."""
        if seq is None:
            return
        with self._order:
            self._order.wait_for(lambda: self._next_seq >= seq, timeout=_ORDER_WAIT_SECONDS)

    def _done_turn(self, seq: int | None) -> None:
        if seq is None:
            return
        with self._order:
            self._next_seq = max(self._next_seq, seq + 1)
            self._order.notify_all()

    def _run_guarded(self, body: bytes, work: Callable[[dict[str, Any]], Any]) -> bytes:
        arrived, session = time.monotonic(), self._sessions
        envelope = wire.decode(body)
        if envelope["incarnation"] != self.incarnation:
            return wire.encode({"restarted": True})
        overdue = self._overdue()
        if overdue is not None:  # a closure hangs here: the chief sends this one elsewhere
            return wire.encode({"busy": overdue})
        seq = envelope.get("seq")
        self._wait_turn(seq)
        try:
            deadline = envelope.get("deadline")
            if session != self._sessions or (
                    deadline is not None and time.monotonic() - arrived > deadline):
                return wire.encode({"expired": True})  # its chief gave up on it: not run
            return self._run_locked(envelope, work, session)
        finally:
            self._done_turn(seq)

    def _run_locked(self, envelope: dict[str, Any], work: Callable[[dict[str, Any]], Any],
                    session: int) -> bytes:
        with self._lock:
            if session != self._sessions:  # a new chief session began while it waited
                return wire.encode({"expired": True})
            _current.index = self.worker_index
            try:
                with self._context():
                    return wire.encode({"ok": work(envelope)})
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the chief
                # sys.exit() too: the worker process serves on; the chief raises it
                return wire.encode({"error": error_info(exc)})
            finally:
                _current.index = None

    def _install(self, body: bytes, caller: str) -> bytes:
        def work(envelope: dict[str, Any]) -> None:
            request = pickling.loads(envelope["blob"], self._resolve)
            try:
                value = request["fn"](*request["args"])
            finally:
                self.variables.settle()
            self.resources[request["rid"]] = value
            self.resource_ids[id(value)] = request["rid"]
        return self._run_guarded(body, work)

    def _run(self, body: bytes, caller: str) -> bytes:
        def work(envelope: dict[str, Any]) -> list[dict[str, Any]]:
            outcomes: list[dict[str, Any]] = []
            for part, blob in enumerate(envelope["blobs"]):
                try:
                    outcomes.append({"ok": self._run_one(envelope, part, blob)})
                except BaseException as exc:  # noqa: BLE001 - every failure goes to the chief
                    outcomes.append({"error": error_info(exc)})  # sys.exit() included
                    break  # the rest are cancelled, as queued closures are after an error
            return outcomes
        return self._run_guarded(body, work)

    def _run_one(self, envelope: dict[str, Any], part: int, blob: bytes) -> Any:
        request = pickling.loads(blob, self._resolve)
        fn = request["fn"]
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self._running = (envelope.get("seq"), part, name, time.monotonic(),
                         envelope.get("deadline"))
        try:
            self._refresh(envelope.get("gen"))
            try:
                result = fn(*request["args"], **request["kwargs"])
            finally:
                self.variables.settle()  # a push still in flight is applied before replying
            changes = self.variables.local_changes()
            if changes:
                self.variables.add(changes)
        finally:
            self._running = None
        return result

    def _refresh(self, generation: Any) -> None:
        """Pull the variables that changed, unless the previous closure's push brought them.

        A push answers with every variable's value as of that update, so a closure that
        follows a pushing one starts from those values, as fresh as a pull would have made
        them then; the chief's ``generation`` changes when it wrote variables itself or
        joined, and then the closure pulls.
        """
        variables = self.variables
        if variables.placements and not (variables.fresh and generation == self._generation):
            variables.pull()
        self._generation = generation
        variables.fresh = False

    # ------------------------------------------------------------ optimizers
    def push_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Send the gradients of ``optimizer``'s variables to the ``ps`` tasks; clear them."""
        rid = self.resource_ids.get(id(optimizer))
        if rid is None:
            raise UsageError(explain("optimizer", type(optimizer).__name__, "steps variables of "
                                     "the parameter servers but was not sent by the chief",
                                     "create the optimizer on the chief, in strategy.scope()"))
        self.variables.push_optimizer(rid, optimizer)
