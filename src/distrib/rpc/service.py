"""What a ``worker`` or ``ps`` task does: serve the chief until it finishes (TF's ``Server.join()``).

:class:`TaskService` runs the task's :class:`~distrib.rpc.transport.RpcServer` with
the methods of its role plus three of its own:

``Hello``
    a chief session starts (the chief's first contact, or a restarted chief): a
    new session makes the task forget the previous session's state;
``Beat``
    the chief is alive (it sends one every second to every task, so a task the
    chief never used still knows it is there; a beat of a new session starts it);
``Shutdown``
    the chief finished: :meth:`TaskService.serve` returns and the task exits 0 — or,
    when the chief stopped because it lost a task (a ``ps`` that stopped answering), raises
    :class:`~distrib.errors.PeerLostError` naming that task, so every task names it.

Every wait is bounded: if no chief connects within the communication timeout, or
the chief stops sending heartbeats for that long, :meth:`~TaskService.serve`
raises :class:`~distrib.errors.PeerLostError` naming the chief.

Example::

    service = TaskService("ps:0", "127.0.0.1:2222", "chief:0", auth, timeout=180,
                          handlers=store_handlers, on_new_session=store.reset)
    service.serve()        # returns when the chief says Shutdown
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from distrib.errors import PeerLostError
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.transport import Handler, RpcServer, startup_timeout

__all__ = ["TaskService", "HEARTBEAT_SECONDS"]

HEARTBEAT_SECONDS = 1.0


class TaskService:
    """Serves one ``worker`` or ``ps`` task for the chief's sessions.

    Args:
        task: this task's name (``"worker:0"``).
        address: its address from the cluster spec (the only one it binds).
        chief: the chief's name (for errors).
        auth: the cluster's authenticator.
        timeout: seconds without a chief before the task gives up.
        handlers: the role's methods.
        code_methods: which of them carry code.
        on_new_session: called when a new chief session starts (forget state).
        incarnation: this process's identity (a restarted task has a new one).
        stream_methods: data methods also served as streams.
        threads: handler threads (each open stream holds one).
    """

    def __init__(self, task: str, address: str, chief: str, auth: Authenticator,
                 timeout: float, handlers: dict[str, Handler],
                 code_methods: frozenset[str] = frozenset(),
                 on_new_session: Callable[[], None] | None = None,
                 incarnation: str | None = None,
                 stream_methods: frozenset[str] = frozenset(), threads: int = 8) -> None:
        self.task = task
        self.chief = chief
        self.timeout = timeout
        self.incarnation = incarnation or uuid.uuid4().hex
        self._on_new_session = on_new_session
        self._session: str | None = None
        self._last_contact = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._chief_error: dict[str, Any] | None = None
        own = {"Hello": self._hello, "Beat": self._beat, "Shutdown": self._shutdown}
        self.server = RpcServer(task, address, auth, {**handlers, **own}, code_methods,
                                threads=threads, stream_methods=stream_methods)

    def _touch(self) -> None:
        self._last_contact = time.monotonic()

    def seconds_since_contact(self) -> float:
        """Seconds since the chief's last ``Hello`` or ``Beat``; 0 before its first (start-up).

        Before the chief's first session the task waits for it to start (see
        :meth:`serve`), which is not silence.
        """
        if self._session is None:
            return 0.0
        return time.monotonic() - self._last_contact

    def _join_session(self, session: str) -> None:
        with self._lock:
            if session != self._session:
                if self._on_new_session is not None:
                    self._on_new_session()
                self._session = session
            self._touch()

    def _hello(self, body: bytes, caller: str) -> bytes:
        self._join_session(wire.decode(body)["session"])
        return wire.encode({"task": self.task, "incarnation": self.incarnation})

    def _beat(self, body: bytes, caller: str) -> bytes:
        self._join_session(wire.decode(body)["session"])
        return wire.encode({"incarnation": self.incarnation})

    def _shutdown(self, body: bytes, caller: str) -> bytes:
        request = wire.decode(body)
        if self._session is None or request["session"] == self._session:
            error = request.get("error")
            if isinstance(error, dict) and error.get("lost"):
                self._chief_error = error
            self._stop.set()
        return wire.encode({})

    def serve(self) -> None:
        """Serve until the chief says Shutdown.

        Raises:
            PeerLostError: no chief connected within the start-up allowance
                (:func:`~distrib.rpc.transport.startup_timeout`), the chief went
                silent for ``timeout`` s, or the chief stopped because it lost a task
                (``lost`` names that task).
        """
        self.server.start()
        try:
            while not self._stop.wait(0.2):
                silent = time.monotonic() - self._last_contact
                starting = self._session is None
                limit = startup_timeout(self.timeout) if starting else self.timeout
                if silent > limit:
                    what = "did not connect" if starting else "stopped sending heartbeats"
                    raise PeerLostError(
                        f"Lost task {self.chief}: the chief {what} for {silent:.0f} s "
                        f"({'start-up allowance' if starting else 'communication timeout'} "
                        f"{limit:.0f} s), so {self.task} stops serving.{self._refusals()} "
                        "Fix: restart the chief (and this task); training resumes from the "
                        "chief's latest checkpoint.", lost=[self.chief])
        finally:
            self.server.stop(grace=1.0)
        error = self._chief_error
        if error is not None:
            lost = [str(t) for t in error["lost"]]
            raise PeerLostError(
                f"Lost task {', '.join(lost)}: {self.chief} stopped training because of it "
                f"({error.get('message', '')}), so {self.task} stops too. Fix: restart "
                f"{', '.join(lost)} (or every task); training resumes from the chief's latest "
                "checkpoint.", lost=lost)

    def _refusals(self) -> str:
        refused = self.server.gate.refused()
        if not refused:
            return ""
        return (f" Meanwhile {self.task} refused {refused} connection(s) whose handshake was "
                "not made with its cluster secret (see the errors logged above): this task "
                "and the chief hold different DISTRIB_CLUSTER_SECRET values.")
