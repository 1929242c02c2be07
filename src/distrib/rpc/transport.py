"""gRPC transport between the tasks of a parameter-server cluster.

Each task runs one :class:`RpcServer` bound to its own address from the cluster
spec (and nothing else: no wildcard address, no shared port) and talks to the
others through :class:`RpcClient`.  Messages are opaque bytes (see
:mod:`distrib.rpc.wire` and :mod:`distrib.rpc.pickling`); every call is
authenticated with the cluster's secret (:mod:`distrib.rpc.auth`) and every call has
a deadline.  Failures become distrib errors that name the task:

* the peer is gone or does not answer in time: :class:`~distrib.errors.PeerLostError`
  with ``lost=[task]``;
* the peer rejected the secret: :class:`~distrib.errors.ConfigError`;
* the handler failed: :class:`~distrib.errors.RemoteError`.

A data method can also be served as a stream (``stream_methods``): :meth:`RpcClient.stream`
opens one bidirectional gRPC stream on which requests and replies alternate.  A
stream costs the caller and the server less than a unary call per message, and the
caller can send a request and take its reply later (a worker's gradient push, while it
finishes its step).  A stream is authenticated once, when it opens (a token made with
the cluster's secret and a fresh nonce, as for a call): its messages then travel on
that one HTTP/2 stream of one connection, where no other party can insert any.  A reply
that does not come within the client's timeout fails the stream with
:class:`~distrib.errors.PeerLostError`, and code never travels on a stream.

Start-up is not steady state: a task may start seconds after the others, and its first
set-up call (building an optimizer imports a large part of torch) can take longer than a
communication timeout chosen to detect a lost task quickly.  Waiting for a task to start
and the one-time set-up calls therefore use :func:`startup_timeout`, at least
:data:`STARTUP_SECONDS`; every other call uses the communication timeout.

Example (two objects in one process)::

    auth = Authenticator("secret")
    server = RpcServer("ps:0", "127.0.0.1:2222", auth, {"Echo": lambda body, caller: body})
    server.start()
    client = RpcClient("chief:0", "ps:0", "127.0.0.1:2222", auth, timeout=10)
    client.call("Echo", b"hi")        # b"hi"
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from distrib.errors import ConfigError, PeerLostError, RemoteError, explain
from distrib.rpc.auth import Authenticator

__all__ = ["RpcServer", "RpcClient", "RpcStream", "Handler", "SERVICE", "STREAM_SUFFIX",
           "STARTUP_SECONDS", "startup_timeout"]

SERVICE = "distrib.Task"
Handler = Callable[[bytes, str], bytes]
_AUTH = "x-distrib-auth"
_FROM = "x-distrib-from"
#: A stream of a method is served under the method's name plus this suffix.
STREAM_SUFFIX = "Stream"
_LOST_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
               grpc.StatusCode.CANCELLED)
#: The least time to wait for a task to start or to answer a one-time set-up call.
STARTUP_SECONDS = 180.0
_MESSAGE_LIMITS = [("grpc.max_send_message_length", -1),
                   ("grpc.max_receive_message_length", -1)]


def startup_timeout(timeout: float) -> float:
    """How long to wait for a task to start, or for a set-up call, given the communication timeout.

    Example:
        >>> startup_timeout(3.0), startup_timeout(600.0)
        (180.0, 600.0)
    """
    return max(timeout, STARTUP_SECONDS)


class RpcServer:
    """The gRPC server of one task, bound to that task's address only.

    Args:
        task: this task's name (``"ps:0"``), for messages.
        address: ``host:port`` from the cluster spec.
        auth: the cluster's authenticator; callers without the secret are rejected.
        handlers: method name -> ``handler(body, caller) -> reply``.
        code_methods: the methods whose body carries code (MACed over the whole body).
        stream_methods: data methods also served as streams (see :meth:`RpcClient.stream`).
        threads: handler threads (an open stream holds one for as long as it lasts).
    """

    def __init__(self, task: str, address: str, auth: Authenticator,
                 handlers: dict[str, Handler], code_methods: frozenset[str] = frozenset(),
                 threads: int = 8, stream_methods: frozenset[str] = frozenset()) -> None:
        self.task = task
        self.address = address
        self._auth = auth
        self._code = code_methods
        self._pool = futures.ThreadPoolExecutor(max_workers=threads,
                                                thread_name_prefix=f"distrib-rpc-{task}")
        self._server = grpc.server(self._pool, options=[
            *_MESSAGE_LIMITS, ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 1000),
            ("grpc.http2.max_ping_strikes", 0)])
        methods = {name: grpc.unary_unary_rpc_method_handler(self._wrap(name, fn))
                   for name, fn in handlers.items()}
        for name in stream_methods:
            if name in code_methods:
                raise ValueError(f"{name} carries code: it cannot be served as a stream")
            methods[name + STREAM_SUFFIX] = grpc.stream_stream_rpc_method_handler(
                self._wrap_stream(name, handlers[name]))
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, methods),))

    def _wrap(self, name: str, fn: Handler) -> Callable[[bytes, Any], bytes]:
        full = name in self._code

        def handle(body: bytes, context: Any) -> bytes:
            meta = dict(context.invocation_metadata())
            if not self._auth.verify(name, body, meta.get(_AUTH), full):
                context.abort(grpc.StatusCode.UNAUTHENTICATED,
                              f"{self.task} rejected a call of {name}: it was not signed with "
                              "this cluster's secret")
            try:
                return fn(body, str(meta.get(_FROM, "?")))
            except Exception as exc:  # reported to the caller, who raises RemoteError
                context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                raise  # unreachable: abort raises
        return handle

    def _wrap_stream(self, name: str, fn: Handler
                     ) -> Callable[[Iterator[bytes], Any], Iterator[bytes]]:
        def rejected(context: Any) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          f"{self.task} rejected a stream of {name}: it was not signed with "
                          "this cluster's secret")

        def handle(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
            meta = dict(context.invocation_metadata())
            if not self._auth.verify(name + STREAM_SUFFIX, b"", meta.get(_AUTH), False):
                rejected(context)
            caller = str(meta.get(_FROM, "?"))
            for body in requests:
                try:
                    reply = fn(body, caller)
                except Exception as exc:  # reported to the caller, who raises RemoteError
                    context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                    raise  # unreachable: abort raises
                yield reply
        return handle

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

    Args:
        me: this task's name (sent with each call, for the peer's messages).
        task: the remote task's name (``"worker:1"``).
        address: its ``host:port``.
        auth: the cluster's authenticator.
        timeout: the default deadline of a call, in seconds.
    """

    def __init__(self, me: str, task: str, address: str, auth: Authenticator,
                 timeout: float) -> None:
        self.me = me
        self.task = task
        self.address = address
        self.timeout = timeout
        self._auth = auth
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(address, options=[
            *_MESSAGE_LIMITS, ("grpc.enable_retries", 0),
            ("grpc.keepalive_time_ms", 5000),
            ("grpc.keepalive_timeout_ms", int(max(1.0, min(timeout, 20.0)) * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000)])
        self._stubs: dict[str, Any] = {}

    def _stub(self, method: str) -> Any:
        stub = self._stubs.get(method)
        if stub is None:
            stub = self._channel.unary_unary(f"/{SERVICE}/{method}")
            self._stubs[method] = stub
        return stub

    def _metadata(self, method: str, body: bytes, code: bool) -> tuple[tuple[str, str], ...]:
        return ((_AUTH, self._auth.sign(method, body, code)), (_FROM, self.me))

    def call(self, method: str, body: bytes, *, code: bool = False,
             timeout: float | None = None) -> bytes:
        """Call ``method`` and wait for its reply (at most ``timeout`` seconds)."""
        deadline = self.timeout if timeout is None else timeout
        try:
            reply: bytes = self._stub(method)(body, timeout=deadline,
                                              metadata=self._metadata(method, body, code))
        except grpc.RpcError as exc:
            raise self.error(method, exc, deadline) from None
        return reply

    def stream(self, method: str) -> RpcStream:
        """Open a stream of the data method ``method`` (the server lists it in ``stream_methods``)."""
        return RpcStream(self, method)

    def future(self, method: str, body: bytes, *, code: bool = False,
               timeout: float | None = None) -> Callable[[], bytes]:
        """Start ``method`` now; returns a function that waits for the reply."""
        deadline = self.timeout if timeout is None else timeout
        fut = self._stub(method).future(body, timeout=deadline,
                                        metadata=self._metadata(method, body, code))

        def result() -> bytes:
            try:
                return bytes(fut.result())
            except grpc.RpcError as exc:
                raise self.error(method, exc, deadline) from None
        return result

    def wait_ready(self, timeout: float) -> bool:
        """Whether the task accepts connections within ``timeout`` seconds."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
            return True
        except grpc.FutureTimeoutError:
            return False

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
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return ConfigError(explain(
                "DISTRIB_CLUSTER_SECRET", "(not shown)", f"{self.task} rejected this task's "
                "call: every task of a cluster must hold the same secret",
                "start the cluster with `distrib run`, or set the same "
                "DISTRIB_CLUSTER_SECRET on every task"))
        return RemoteError(f"{method} failed on {self.task}: {details}")

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()


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
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        metadata = ((_AUTH, client._auth.sign(method + STREAM_SUFFIX, b"", False)),
                    (_FROM, client.me))
        self._replies: Any = client._channel.stream_stream(
            f"/{SERVICE}/{method}{STREAM_SUFFIX}")(iter(self._requests.get, None),
                                                    metadata=metadata)
        self._sent: float | None = None  # when the outstanding request was sent
        self._timed_out = False
        self.closed = False
        threading.Thread(target=self._watch, daemon=True,
                         name=f"distrib-stream-{client.task}-{method}").start()

    def _watch(self) -> None:
        while not self.closed and not self._replies.done():  # ends with its stream
            time.sleep(1.0)
            sent = self._sent
            if sent is not None and time.monotonic() - sent > self.client.timeout:
                self._timed_out = True
                self._replies.cancel()
                return

    def send(self, body: bytes) -> None:
        """Send one request (the previous one's reply must have been received)."""
        if self.closed:
            raise self.client.lost(f"closed its stream of {self.method} earlier")
        self._sent = time.monotonic()
        self._requests.put(body)

    def receive(self) -> bytes:
        """The reply to the request sent last.

        Raises:
            PeerLostError: the task is gone, or did not answer within the timeout.
            RemoteError: the handler failed (the stream is closed).
        """
        try:
            reply: bytes = next(self._replies)
        except grpc.RpcError as exc:
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
        return reply

    def close(self) -> None:
        """End the stream."""
        if not self.closed:
            self.closed = True
            self._requests.put(None)
            self._replies.cancel()
