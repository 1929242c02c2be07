"""The chief's side of a parameter-server cluster: sessions, heartbeats, per-worker objects, closures.

:class:`ClusterClient` owns the chief's connections:

* to every task, a heartbeat every second, each task on its own thread with its own
  deadline (the communication timeout), so one task that stops answering delays no
  other task's heartbeat; a ``ps`` that stops answering is recorded as lost
  (:meth:`ClusterClient.check` raises the error naming it, and :meth:`~ClusterClient.shutdown`
  tells every other task), a worker that stops answering loses the closures it runs
  (they go back to the coordinator's queue);
* to every ``ps`` task: a :class:`~distrib.rpc.variables.VariableClient`;
* to every worker: per-worker objects (:meth:`~ClusterClient.add_per_worker`), sent
  to each worker, in order, before its next closure, and sent again in full to a
  worker that restarted (a new incarnation); closures (:meth:`~ClusterClient.run`).

A new chief session (each chief process has its own) makes every task forget the
previous one, so a restarted chief starts from a clean cluster and restores its
checkpoint.

Example::

    cluster = ClusterClient("chief:0", [("ps:0", "h1:2222")], [("worker:0", "h2:2222")],
                            auth, timeout=180)
    cluster.connect_ps()
    [(ok, result)] = cluster.run(0, [pickling.dumps({"fn": f, "args": (), "kwargs": {}})])
"""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from typing import Any

from distrib import errors
from distrib.errors import PeerLostError, RemoteError
from distrib.rpc import pickling, wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.service import HEARTBEAT_SECONDS
from distrib.rpc.transport import RpcClient, startup_timeout
from distrib.rpc.variables import VariableClient

__all__ = ["ClusterClient", "WorkerBusyError", "remote_exception"]

_FOREVER = 365 * 24 * 3600.0


class WorkerBusyError(PeerLostError):
    """A worker still runs a closure past its timeout: it takes no other closure meanwhile.

    Like a lost worker (``lost == ["worker:i"]``), except that it answers: the closure
    that got this error did not run there and goes back to the queue.
    """

_BUILTIN_ERRORS = {name: getattr(builtins, name) for name in (
    "ValueError", "TypeError", "RuntimeError", "KeyError", "IndexError", "ZeroDivisionError",
    "ArithmeticError", "AssertionError", "NotImplementedError", "AttributeError",
    "LookupError", "StopIteration", "OverflowError", "FloatingPointError", "OSError",
    "FileNotFoundError", "PermissionError", "ImportError", "ModuleNotFoundError",
    "NameError", "RecursionError", "MemoryError")}
_DISTRIB_ERRORS = {name: getattr(errors, name) for name in (
    "ConfigError", "UsageError", "ContextError", "InvalidTypeError", "DataError",
    "CancelledError")}


def remote_exception(info: dict[str, Any], where: str) -> BaseException:
    """The exception for a failure reported by a worker (builtin and distrib types kept).

    Example:
        >>> e = remote_exception({"type": "ZeroDivisionError", "module": "builtins",
        ...                       "message": "division by zero", "traceback": "",
        ...                       "lost": []}, "worker:1")
        >>> type(e).__name__, str(e)
        ('ZeroDivisionError', 'division by zero (raised on worker:1)')
    """
    name, message, tb = info["type"], info["message"], info["traceback"]
    text = f"{message} (raised on {where})"
    exc: BaseException
    if info["lost"]:
        exc = PeerLostError(f"{message} (reported by {where})", lost=info["lost"])
    elif info["module"] == "builtins" and name in ("SystemExit", "KeyboardInterrupt"):
        what = f"sys.exit({message})" if name == "SystemExit" else "KeyboardInterrupt"
        exc = RemoteError(errors.explain(
            "scheduled function", f"{what} on {where}", "a function scheduled on a worker "
            "ended with " + what + ": the worker serves on, and the function failed",
            "return a value or raise an exception from the function instead"), name, tb)
    elif info["module"] == "builtins" and name in _BUILTIN_ERRORS:
        exc = _BUILTIN_ERRORS[name](text)
    elif info["module"].startswith("distrib.") and name in _DISTRIB_ERRORS:
        exc = _DISTRIB_ERRORS[name](text)
    else:
        exc = RemoteError(f"{name}: {text}", name, tb)
    if tb and hasattr(exc, "add_note"):
        exc.add_note(f"Traceback on {where}:\n{tb.rstrip()}")
    return exc


class ClusterClient:
    """The chief's connections to the ``ps`` tasks and the workers.

    Args:
        me: the chief's task name.
        ps: ``(name, address)`` of every ``ps`` task, in order.
        workers: ``(name, address)`` of every worker, in order.
        auth: the cluster's authenticator.
        timeout: the communication timeout in seconds.
    """

    def __init__(self, me: str, ps: list[tuple[str, str]], workers: list[tuple[str, str]],
                 auth: Authenticator, timeout: float) -> None:
        self.me = me
        self.timeout = timeout
        self.session = uuid.uuid4().hex
        self.ps = [RpcClient(me, name, addr, auth, timeout) for name, addr in ps]
        self.workers = [RpcClient(me, name, addr, auth, timeout) for name, addr in workers]
        self.variables = VariableClient(self.ps)
        self._per_worker: list[bytes] = []
        self._installed = [0] * len(workers)
        self._worker_locks = [threading.Lock() for _ in workers]
        self._tickets = [0] * len(workers)
        self._incarnations: list[str | None] = [None] * len(workers)
        self._lock = threading.Lock()
        self._error: PeerLostError | None = None
        self._stop = threading.Event()
        self._beats: list[threading.Thread] = []
        #: task -> when a heartbeat to it last failed (cleared when one is answered)
        self._silent: dict[str, tuple[float, PeerLostError]] = {}
        self._reached: set[str] = set()  # tasks that answered during this session
        self._joins = 0

    # ------------------------------------------------------------- sessions
    def _hello(self, client: RpcClient) -> str:
        reply = wire.decode(client.call("Hello", wire.encode({"session": self.session})))
        self._reached.add(client.task)
        return str(reply["incarnation"])

    def connect_ps(self) -> None:
        """Wait for every ``ps`` task and start this chief's session.

        A ``ps`` task gets :func:`~distrib.rpc.transport.startup_timeout` to start: at
        least 180 s, or the communication timeout where that is longer.

        Raises:
            PeerLostError: a ``ps`` task did not start in that time.
        """
        for client in self.ps:
            client.ensure_ready(startup_timeout(self.timeout), "start every task of the "
                                "cluster (the same program, each with its own TF_CONFIG), "
                                "with the addresses TF_CONFIG gives them")
            self._hello(client)
        self._beats = [threading.Thread(target=self._beat_loop, args=(client,), daemon=True,
                                        name=f"distrib-heartbeat-{client.task}")
                       for client in [*self.ps, *self.workers]]
        for thread in self._beats:
            thread.start()

    def connect_worker(self, index: int, timeout: float) -> bool:
        """Start the session on worker ``index``; False if it did not answer within ``timeout``.

        A worker that restarted since the last contact gets every per-worker object again.
        """
        client = self.workers[index]
        if not client.wait_ready(timeout):
            return False
        with self._worker_locks[index]:
            try:
                incarnation = self._hello(client)
            except PeerLostError:
                return False
            if incarnation != self._incarnations[index]:
                self._incarnations[index] = incarnation
                self._installed[index] = 0
                self._tickets[index] = 0
        return True

    def ticket(self, index: int) -> int:
        """The next position in worker ``index``'s order of closures (taken when dispatching).

        The worker runs closures in ticket order, so a worker fed several closures at once
        (to hide the round trip) still runs them in the order they were dispatched.
        """
        with self._worker_locks[index]:
            self._tickets[index] += 1
            return self._tickets[index] - 1

    def _beat_loop(self, client: RpcClient) -> None:
        """Heartbeats to one task, each with the communication timeout as its deadline."""
        body = wire.encode({"session": self.session})
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                client.call("Beat", body, timeout=self.timeout)
                self._reached.add(client.task)
                self._silent.pop(client.task, None)
            except PeerLostError as exc:
                self._silent[client.task] = (time.monotonic(), exc)
                if client in self.ps:
                    self._lost_ps(exc)
            except Exception:  # noqa: BLE001 - a worker's state is handled by dispatch
                pass

    def _lost_ps(self, error: PeerLostError) -> None:
        with self._lock:
            if self._error is None:
                self._error = error

    def silent_since(self, task: str, since: float) -> PeerLostError | None:
        """The error of a heartbeat to ``task`` that failed after ``since`` (monotonic), if any."""
        failed = self._silent.get(task)
        return failed[1] if failed is not None and failed[0] > since else None

    def check(self) -> None:
        """Raise the error of a lost ``ps`` task, if any."""
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------ per-worker objects
    def add_per_worker(self, rid: int, fn: Any, args: tuple[Any, ...],
                       refs: pickling.Refs) -> None:
        """Make ``fn(*args)`` per-worker object ``rid`` on every worker (before its next closure)."""
        blob = pickling.dumps({"rid": rid, "fn": fn, "args": args}, refs)
        with self._lock:
            self._per_worker.append(blob)

    def _install_all(self, index: int) -> None:
        client = self.workers[index]
        with self._worker_locks[index]:
            while True:
                with self._lock:
                    if self._installed[index] >= len(self._per_worker):
                        return
                    blob = self._per_worker[self._installed[index]]
                self._reply(index, client.call("Install", self._envelope(index, {"blob": blob}),
                                               code=True, timeout=None))
                self._installed[index] += 1

    def _envelope(self, index: int, content: dict[str, Any], seq: int | None = None,
                  deadline: float | None = None) -> bytes:
        return wire.encode({"incarnation": self._incarnations[index], **content,
                            "seq": seq, "gen": self.generation, "deadline": deadline})

    @property
    def generation(self) -> int:
        """Changes when the chief wrote variables or joined: workers then pull before a closure."""
        return self.variables.writes + self._joins

    def joined(self) -> None:
        """Every scheduled closure finished: the next closure on each worker pulls first."""
        self._joins += 1

    def _reply(self, index: int, reply: bytes) -> Any:
        answer = wire.decode(reply)
        client = self.workers[index]
        if answer.get("restarted"):
            raise PeerLostError(f"Lost task {client.task}: it restarted (a new process at "
                                f"{client.address}) and must be sent its objects again.",
                                lost=[client.task])
        if "busy" in answer or answer.get("expired"):
            busy = answer.get("busy") or {"fn": "?", "seconds": 0.0}
            raise WorkerBusyError(
                f"{client.task} is still running {busy['fn']} ({busy['seconds']:.0f} s, past "
                "the closure timeout): it gets no closure until that one ends.",
                lost=[client.task])
        if "error" in answer:
            raise remote_exception(answer["error"], self.workers[index].task)
        return answer["ok"]

    def run(self, index: int, blobs: list[bytes], seq: int | None = None,
            timeout: float | None = None) -> list[tuple[bool, Any]]:
        """Run pickled closures in order on worker ``index``, in one call (``seq``: its :meth:`ticket`).

        Returns one ``(True, result)`` or ``(False, exception)`` per closure that ran;
        after a failure the rest did not run (the list is shorter). ``timeout``
        (seconds, None: no limit) bounds each closure.

        Raises:
            PeerLostError: the worker (``lost == ["worker:i"]``) or a ``ps`` it used is lost.
            WorkerBusyError: the worker is still running an earlier closure past its
                timeout (these closures did not run; send them elsewhere).
            TimeoutError: a closure ran longer than ``timeout`` on a worker that still
                answers; the message names the worker and the function.
        """
        self._install_all(index)
        client = self.workers[index]
        envelope = self._envelope(index, {"blobs": blobs}, seq, timeout)
        start = time.monotonic()
        try:
            reply = self._call_watched(index, envelope, _FOREVER if timeout is None else timeout)
        except PeerLostError:
            if timeout is None or time.monotonic() - start < timeout:
                raise  # gone, not late
            running = self._running(index)  # raises PeerLostError if the worker is gone
        else:
            outcomes = [(True, o["ok"]) if "ok" in o else
                        (False, remote_exception(o["error"], client.task))
                        for o in self._reply(index, reply)]
            for ok, value in outcomes:
                if not ok and isinstance(value, PeerLostError) and \
                        set(value.lost) & {c.task for c in self.ps}:
                    self._lost_ps(value)  # a ps lost is fatal: every task is told at shutdown
            return outcomes
        if running is not None and running["seq"] == seq and running["seconds"] < timeout:
            # a later closure of this call runs: give it its own timeout before judging
            time.sleep(timeout - running["seconds"] + 0.5)
            again = self._running(index)
            if again is None or again["seq"] != seq or again["part"] != running["part"]:
                raise WorkerBusyError(
                    f"{client.task} ran the closures of one call for longer than the closure "
                    f"timeout ({timeout:g} s) together: they run again, elsewhere.",
                    lost=[client.task])
            running = again
        if running is None or running["seq"] != seq:
            raise WorkerBusyError(f"{client.task} did not start this closure within the closure "
                                  f"timeout ({timeout:g} s): an earlier one still runs there.",
                                  lost=[client.task])
        raise TimeoutError(errors.explain(
            "closure", f"{running['fn']} on {client.task}", f"ran for more than the closure "
            f"timeout ({timeout:g} s) and has not returned: the worker still answers, so the "
            "function itself hangs or is slower than the timeout allows; the worker gets no "
            "closure until it returns",
            "find what the function waits for (a lock, a queue, a remote call), or raise "
            "ClusterCoordinator(strategy, closure_timeout=...) (None: no limit)"))

    def _call_watched(self, index: int, envelope: bytes, deadline: float) -> bytes:
        """``Run`` on worker ``index``; abandoned if a heartbeat to it fails meanwhile.

        A worker that stops answering (stopped, its machine hung) may still hold the
        call's connection open: its heartbeat, whose deadline is the communication
        timeout, tells that it is lost, and its closures go elsewhere.
        """
        client = self.workers[index]
        started = time.monotonic()
        pending = client.start("Run", envelope, timeout=deadline)
        while not pending.wait(0.5):
            silent = self.silent_since(client.task, started)
            if silent is not None:
                pending.cancel()
                raise PeerLostError(f"Lost task {client.task}: it did not answer a heartbeat "
                                    f"within {self.timeout:.0f} s while running closures "
                                    f"({silent}); they run again on another worker.",
                                    lost=[client.task])
        return pending.result()

    def _running(self, index: int) -> dict[str, Any] | None:
        client = self.workers[index]
        reply = wire.decode(client.call("Status", wire.encode({}),
                                        timeout=min(self.timeout, 10.0)))
        running: dict[str, Any] | None = reply["running"]
        return running

    # ------------------------------------------------------------- shutdown
    def shutdown(self) -> None:
        """Tell every task that the chief finished, and close the connections.

        A task that never answered in this session (still starting) is waited for, at
        most the communication timeout, so that it does not wait for a chief that is
        gone; a task that answered before and is unreachable now is not.
        """
        self._stop.set()
        error = self._error
        body = wire.encode({"session": self.session, "error": None if error is None else
                            {"message": str(error), "lost": list(error.lost)}})

        def tell(client: RpcClient) -> None:
            if client.task not in self._reached and not client.wait_ready(self.timeout):
                return
            try:
                client.call("Shutdown", body, timeout=5.0)
            except Exception:  # noqa: BLE001 - the task is gone already
                pass
        threads = [threading.Thread(target=tell, args=(c,), daemon=True)
                   for c in [*self.workers, *self.ps]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.timeout + 10.0)
        for client in [*self.workers, *self.ps]:
            client.close()
