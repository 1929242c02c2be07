"""gRPC transport between the tasks of a parameter-server cluster.

Each task runs one :class:`RpcServer` bound to its own address from the cluster
spec (and nothing else: no wildcard address, no shared port) and talks to the
others through :class:`RpcClient`.  Messages are opaque bytes (see
:mod:`distrib.rpc.wire` and :mod:`distrib.rpc.pickling`) of at most
:data:`~distrib.rpc.gate.MAX_MESSAGE_BYTES`; every call has a deadline and is
authenticated with the cluster's secret (:mod:`distrib.rpc.auth`): a client makes a
handshake with each task it calls, then MACs every call (method, counter, whole
body) with that connection's key, and checks the MAC of every reply.  The server's
:class:`~distrib.rpc.gate.Gate` checks each call's header before reading its body.
Failures become distrib errors that name the task:

* the peer is gone or does not answer in time: :class:`~distrib.errors.PeerLostError`
  with ``lost=[task]``;
* the peer refused the cluster's secret, or a call: :class:`~distrib.errors.ConfigError`;
* the handler failed, or a reply was altered: :class:`~distrib.errors.RemoteError`.

A data method can also be served as a stream (``stream_methods``): :meth:`RpcClient.stream`
opens one bidirectional gRPC stream on which requests and replies alternate.  A
stream costs the caller and the server less than a unary call per message, and the
caller can send a request and take its reply later (a worker's gradient push, while it
finishes its step).  A stream opens with a header made with the connection's key and a
fresh counter, and every message on it, both ways, is MACed with its place in the
stream.  A reply that does not come within the client's timeout fails the stream with
:class:`~distrib.errors.PeerLostError`, and code never travels on a stream.

Start-up is not steady state: a task may start seconds after the others, and its first
set-up call (building an optimizer imports a large part of torch) can take longer than a
communication timeout chosen to detect a lost task quickly.  Waiting for a task to start
and the one-time set-up calls therefore use :func:`startup_timeout`, at least
:data:`STARTUP_SECONDS`; every other call uses the communication timeout.

Example (two objects in one process)::

    auth = Authenticator("a secret of 16+ bytes")
    server = RpcServer("ps:0", "127.0.0.1:2222", auth, {"Echo": lambda body, caller: body})
    server.start()
    client = RpcClient("chief:0", "ps:0", "127.0.0.1:2222", auth, timeout=10)
    client.call("Echo", b"hi")        # b"hi"
"""

from __future__ import annotations

import hmac
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import grpc

from distrib.errors import ConfigError, PeerLostError, RemoteError, UsageError, explain
from distrib.rpc.auth import MAC_BYTES, Authenticator, ConnectionKey
from distrib.rpc.gate import (
    HANDSHAKE,
    HEADERS,
    MAX_MESSAGE_BYTES,
    REHANDSHAKE,
    SERVICE,
    Gate,
    Handler,
)

__all__ = ["RpcServer", "RpcClient", "RpcStream", "PendingCall", "Handler", "SERVICE",
           "STREAM_SUFFIX", "STARTUP_SECONDS", "startup_timeout"]

#: A stream of a method is served under the method's name plus this suffix.
STREAM_SUFFIX = "Stream"
_LOST_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
               grpc.StatusCode.CANCELLED)
#: The least time to wait for a task to start or to answer a one-time set-up call.
STARTUP_SECONDS = 180.0
_MESSAGE_LIMITS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 2 * MAC_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES + 2 * MAC_BYTES)]
_ALTERED = ("altered in transit (its MAC does not match): something between the tasks "
            "changes their traffic. Fix: run the cluster on a network nobody else can write "
            "to (see the security guide).")


def startup_timeout(timeout: float) -> float:
    """How long to wait for a task to start, or for a set-up call, given the communication timeout.

    Example:
        >>> startup_timeout(3.0), startup_timeout(600.0)
        (180.0, 600.0)
    """
    return max(timeout, STARTUP_SECONDS)


def _rehandshake(exc: Any) -> bool:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    return code is grpc.StatusCode.UNAUTHENTICATED and str(details).startswith(REHANDSHAKE)


class RpcServer:
    """The gRPC server of one task, bound to that task's address only.

    Args:
        task: this task's name (``"ps:0"``), for messages.
        address: ``host:port`` from the cluster spec.
        auth: the cluster's authenticator; callers without the secret are refused.
        handlers: method name -> ``handler(body, caller) -> reply``.
        code_methods: the methods whose body carries code (never served as streams).
        stream_methods: data methods also served as streams (see :meth:`RpcClient.stream`).
        threads: handler threads (an open stream holds one for as long as it lasts).
    """

    def __init__(self, task: str, address: str, auth: Authenticator,
                 handlers: dict[str, Handler], code_methods: frozenset[str] = frozenset(),
                 threads: int = 8, stream_methods: frozenset[str] = frozenset()) -> None:
        self.task = task
        self.address = address
        for name in stream_methods:
            if name in code_methods:
                raise ValueError(f"{name} carries code: it cannot be served as a stream")
        self._pool = futures.ThreadPoolExecutor(max_workers=threads,
                                                thread_name_prefix=f"distrib-rpc-{task}")
        self._server = grpc.server(self._pool, options=[
            *_MESSAGE_LIMITS, ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 1000),
            ("grpc.http2.max_ping_strikes", 0)])
        #: Authenticates every call (see :mod:`distrib.rpc.gate`); ``gate.refusals`` counts them.
        self.gate = Gate(task, auth, dict(handlers),
                         {name + STREAM_SUFFIX: handlers[name] for name in stream_methods})
        self._server.add_generic_rpc_handlers((self.gate,))

    def start(self) -> None:
        """Bind the task's own address and start serving.

        Raises:
            ConfigError: the address cannot be bound (in use, or not this machine's).
        """
        try:
            port = self._server.add_insecure_port(self.address)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(explain(
                f"the address of {self.task}", self.address,
                "this task must listen on its own address from the cluster spec, and could "
                "not (the port is in use, or the host is not this machine)",
                "free the port or fix the address of this task in TF_CONFIG"))
        self._server.start()

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving; calls in progress get ``grace`` seconds to finish."""
        self._server.stop(grace).wait(grace + 1.0)
        self._pool.shutdown(wait=False)


class RpcClient:
    """Calls the methods of one remote task.

    The first call makes a handshake (the connection's key); a task that restarted, or
    a connection that was made again, gets a new handshake and the call once more (it
    was refused before its body was read, so it did not run).

    Args:
        me: this task's name (sent with each call, for the peer's messages).
        task: the remote task's name (``"worker:1"``).
        address: its ``host:port``.
        auth: the cluster's authenticator.
        timeout: the default deadline of a call, in seconds.
        interceptors: gRPC client interceptors (to watch what crosses the network).
    """

    def __init__(self, me: str, task: str, address: str, auth: Authenticator,
                 timeout: float, interceptors: Sequence[Any] = ()) -> None:
        self.me = me
        self.task = task
        self.address = address
        self.timeout = timeout
        self._auth = auth
        self._lock = threading.Lock()
        self._raw_channel = grpc.insecure_channel(address, options=[
            *_MESSAGE_LIMITS, ("grpc.enable_retries", 0),
            ("grpc.keepalive_time_ms", 5000),
            ("grpc.keepalive_timeout_ms", int(max(1.0, min(timeout, 20.0)) * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000)])
        self._channel = grpc.intercept_channel(self._raw_channel, *interceptors) \
            if interceptors else self._raw_channel
        self._stubs: dict[str, Any] = {}
        self._conn: ConnectionKey | None = None
        self._counter = 0

    def _stub(self, method: str) -> Any:
        stub = self._stubs.get(method)
        if stub is None:
            stub = self._channel.unary_unary(f"/{SERVICE}/{method}")
            self._stubs[method] = stub
        return stub

    # ------------------------------------------------------------ handshake
    def _connection(self, deadline: float) -> tuple[ConnectionKey, int]:
        """The connection's key (a handshake first, if none) and a fresh counter."""
        with self._lock:
            conn = self._conn
            if conn is None:
                conn = self._conn = self._handshake(min(deadline, startup_timeout(self.timeout)))
            self._counter += 1
            return conn, self._counter

    def _handshake(self, deadline: float) -> ConnectionKey:
        nonce, token = self._auth.hello(self.me, self.task)
        try:
            reply = self._stub(HANDSHAKE)(b"", timeout=deadline, metadata=(
                (HEADERS["hello"], token), (HEADERS["from"], self.me)))
        except grpc.RpcError as exc:
            raise self.error(HANDSHAKE, exc, deadline) from None
        conn = self._auth.accept_welcome(nonce, bytes(reply), self.me, self.task)
        if conn is None:
            raise ConfigError(explain(
                "DISTRIB_CLUSTER_SECRET", "(not shown)", f"{self.task} at {self.address} "
                f"answered {self.me}'s handshake without proving it holds this cluster's "
                "secret: it holds another secret, or is not this cluster's task",
                f"set the same DISTRIB_CLUSTER_SECRET on {self.me} and {self.task}, and check "
                "the cluster's addresses"))
        return conn

    def _forget(self, conn: ConnectionKey) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None

    def check_size(self, method: str, body: bytes) -> None:
        """Raise :class:`UsageError` if ``body`` is larger than a message may be."""
        if len(body) > MAX_MESSAGE_BYTES:
            raise UsageError(explain(
                f"a {method} message to {self.task}", f"{len(body)} bytes", "messages between "
                f"tasks are limited to {MAX_MESSAGE_BYTES} bytes", "shard large variables over "
                "more ps tasks (variable_partitioner) or use smaller ones"))

    def _metadata(self, conn: ConnectionKey, method: str, counter: int,
                  body: bytes) -> tuple[tuple[str, str], ...]:
        self.check_size(method, body)
        return ((HEADERS["from"], self.me), (HEADERS["conn"], conn.conn_id),
                (HEADERS["call"], conn.call_token(method, counter, body)))

    def _open(self, conn: ConnectionKey, method: str, counter: int, reply: bytes) -> bytes:
        view = memoryview(reply)
        body = view[MAC_BYTES:]
        if view.nbytes < MAC_BYTES or not hmac.compare_digest(
                conn.reply_mac(method, counter, body), bytes(view[:MAC_BYTES])):
            raise RemoteError(f"The reply of {self.task} to {method} was {_ALTERED}")
        return bytes(body)

    # ---------------------------------------------------------------- calls
    def call(self, method: str, body: bytes, *, code: bool = False,
             timeout: float | None = None) -> bytes:
        """Call ``method`` and wait for its reply (at most ``timeout`` seconds).

        Every call is MACed over its whole body (``code`` only says that it carries code).
        """
        deadline = self.timeout if timeout is None else timeout
        for attempt in range(2):
            conn, counter = self._connection(deadline)
            metadata = self._metadata(conn, method, counter, body)
            try:
                reply: bytes = self._stub(method)(body, timeout=deadline, metadata=metadata)
            except grpc.RpcError as exc:
                if attempt == 0 and _rehandshake(exc):
                    self._forget(conn)
                    continue
                raise self.error(method, exc, deadline) from None
            return self._open(conn, method, counter, reply)
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(self, method: str) -> RpcStream:
        """Open a stream of the data method ``method`` (the server lists it in ``stream_methods``)."""
        return RpcStream(self, method)

    def start(self, method: str, body: bytes, *, timeout: float | None = None) -> PendingCall:
        """Start ``method`` now; the :class:`PendingCall` waits for, or cancels, its reply."""
        return PendingCall(self, method, body, self.timeout if timeout is None else timeout)

    def future(self, method: str, body: bytes, *, code: bool = False,
               timeout: float | None = None) -> Callable[[], bytes]:
        """Start ``method`` now; returns a function that waits for the reply."""
        return self.start(method, body, timeout=timeout).result

    def wait_ready(self, timeout: float) -> bool:
        """Whether the task accepts connections within ``timeout`` seconds.

        A plain TCP connection tells (gRPC's own readiness watch races with
        :meth:`close` on another thread).
        """
        host, _, port = self.address.rpartition(":")
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                socket.create_connection((host.strip("[]"), int(port)),
                                         timeout=max(0.1, min(left, 5.0))).close()
                return True
            except (OSError, ValueError):
                if time.monotonic() + 0.1 >= deadline:
                    return False
                time.sleep(0.1)

    def ensure_ready(self, timeout: float, fix: str) -> None:
        """Raise :class:`PeerLostError` naming the task unless it is ready within ``timeout``.

        ``fix`` tells the user what to do (one sentence, no final stop).
        """
        if not self.wait_ready(timeout):
            raise PeerLostError(f"Lost task {self.task}: it did not accept connections at "
                                f"{self.address} within {timeout:.0f} s. Fix: {fix}.",
                                lost=[self.task])

    def lost(self, why: str) -> PeerLostError:
        """The error for this task lost: ``why`` completes "it ..." (no final stop)."""
        return PeerLostError(f"Lost task {self.task} ({self.address}): it {why}; it "
                             "stopped, was killed, or its machine became unreachable.",
                             lost=[self.task])

    def error(self, method: str, exc: Any, deadline: float) -> Exception:
        """The distrib error for a failed call."""
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code in _LOST_CODES:
            return self.lost(f"did not answer {method} within {deadline:.0f} s"
                             if code is grpc.StatusCode.DEADLINE_EXCEEDED else
                             f"is unreachable ({details})")
        if code is grpc.StatusCode.UNAUTHENTICATED and method == HANDSHAKE:
            return ConfigError(explain(
                "DISTRIB_CLUSTER_SECRET", "(not shown)", f"{self.task} refused {self.me}'s "
                "connection: the two hold different cluster secrets (every task of a cluster "
                "must hold the same one)", "start the cluster with `distrib run`, or set the "
                f"same DISTRIB_CLUSTER_SECRET on {self.me} and {self.task}"))
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return ConfigError(explain(
                f"a {method} call of {self.me}", "(refused)", f"{self.task} refused it: "
                f"{details}", "run the cluster on a network where nobody else can send or "
                "replay its traffic, with the same DISTRIB_CLUSTER_SECRET on every task"))
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return UsageError(explain(f"a {method} message between {self.me} and {self.task}",
                                      "(too large)", str(details), "shard large variables "
                                      "over more ps tasks, or use smaller ones"))
        return RemoteError(f"{method} failed on {self.task}: {details}")

    def close(self) -> None:
        """Close the connection."""
        self._raw_channel.close()


class PendingCall:
    """A call in flight (see :meth:`RpcClient.start`)."""

    def __init__(self, client: RpcClient, method: str, body: bytes, deadline: float) -> None:
        self.client = client
        self.method = method
        self._body = body
        self._deadline = deadline
        self._conn, self._counter = client._connection(deadline)
        self._done = threading.Event()
        self._fut = client._stub(method).future(
            body, timeout=deadline, metadata=client._metadata(self._conn, method,
                                                              self._counter, body))
        self._fut.add_done_callback(lambda _: self._done.set())

    def wait(self, timeout: float) -> bool:
        """Whether the reply (or the failure) came within ``timeout`` seconds."""
        return self._done.wait(timeout)

    def cancel(self) -> None:
        """Stop waiting for the reply (the task may still run the call)."""
        self._fut.cancel()

    def result(self) -> bytes:
        """The reply; raises the call's error (see :meth:`RpcClient.error`)."""
        client = self.client
        try:
            return client._open(self._conn, self.method, self._counter, self._fut.result())
        except grpc.RpcError as exc:
            if _rehandshake(exc):
                client._forget(self._conn)
                return client.call(self.method, self._body, timeout=self._deadline)
            raise client.error(self.method, exc, self._deadline) from None


class RpcStream:
    """A stream of calls of one data method to one task: :meth:`send`, then :meth:`receive`.

    Requests and replies alternate (one request outstanding at a time).  A reply that
    does not come within the client's timeout cancels the stream (a watchdog checks
    once a second); a failed stream is :attr:`closed` and raises the error of a failed
    unary call.  Use :meth:`RpcClient.stream` to open one.

    Example::

        stream = client.stream("Push")
        stream.send(body)          # returns at once
        ...                        # other work while the task answers
        reply = stream.receive()
    """

    def __init__(self, client: RpcClient, method: str) -> None:
        self.client = client
        self.method = method
        self._served = method + STREAM_SUFFIX
        self._sent: float | None = None  # when the outstanding request was sent
        self._timed_out = False
        self.closed = False
        self._first: bytes | None = None  # kept until answered: sent again after a handshake
        self._open()
        threading.Thread(target=self._watch, daemon=True,
                         name=f"distrib-stream-{client.task}-{method}").start()

    def _open(self) -> None:
        client = self.client
        self._conn, self._counter = client._connection(client.timeout)
        self._index = self._received = 0
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        metadata = ((HEADERS["from"], client.me), (HEADERS["conn"], self._conn.conn_id),
                    (HEADERS["open"], self._conn.stream_token(self._served, self._counter)))
        self._replies: Any = client._channel.stream_stream(f"/{SERVICE}/{self._served}")(
            iter(self._requests.get, None), metadata=metadata)

    def _watch(self) -> None:
        while not self.closed:  # ends with its stream
            time.sleep(1.0)
            sent = self._sent
            if sent is not None and time.monotonic() - sent > self.client.timeout:
                self._timed_out = True
                self._replies.cancel()
                return

    def _put(self, body: bytes) -> None:
        if self._index == 0:
            self._first = body
        self.client.check_size(self.method, body)
        self._requests.put(self._conn.seal(b"request", self._served, self._counter,
                                           self._index, body))
        self._index += 1

    def send(self, body: bytes) -> None:
        """Send one request (the previous one's reply must have been received)."""
        if self.closed:
            raise self.client.lost(f"closed its stream of {self.method} earlier")
        self._sent = time.monotonic()
        self._put(body)

    def receive(self) -> bytes:
        """The reply to the request sent last.

        Raises:
            PeerLostError: the task is gone, or did not answer within the timeout.
            RemoteError: the handler failed, or the reply was altered (the stream is closed).
        """
        try:
            reply: bytes = next(self._replies)
        except grpc.RpcError as exc:
            if self._first is not None and self._index == 1 and _rehandshake(exc):
                self._requests.put(None)
                self.client._forget(self._conn)
                first, self._first = self._first, None
                self._open()           # the task did not read it: once more, on a new key
                self._put(first)
                self._first = None
                return self.receive()
            self.close()
            if self._timed_out:
                raise self.client.lost(f"did not answer {self.method} within "
                                       f"{self.client.timeout:.0f} s") from None
            raise self.client.error(self.method, exc, self.client.timeout) from None
        except StopIteration:
            self.close()
            raise self.client.lost(f"ended its stream of {self.method}") from None
        finally:
            self._sent = None
        body = self._conn.unseal(b"reply", self._served, self._counter, self._received, reply)
        self._received += 1
        self._first = None
        if body is None:
            self.close()
            raise RemoteError(f"A reply of {self.client.task} on its {self.method} stream was "
                              f"{_ALTERED}")
        return bytes(body)

    def close(self) -> None:
        """End the stream."""
        if not self.closed:
            self.closed = True
            self._requests.put(None)
            self._replies.cancel()
