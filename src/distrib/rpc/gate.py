"""The server side of RPC authentication: every call is checked before its body is read.

:class:`Gate` is the one gRPC handler of a task's server.  gRPC asks it for a call's
handler as soon as the call's headers arrive, before any of its body is read, and the
gate answers with:

* the handshake, for ``Handshake`` calls whose hello token is made with the cluster's
  secret and was never seen before: a new connection key
  (:meth:`~distrib.rpc.auth.Authenticator.welcome`), bound to the caller's address;
* the method's handler, for a call whose header is made with a known connection's key,
  with a counter not seen before and a length within :data:`MAX_MESSAGE_BYTES`: the
  handler checks the body against the header's digest once it is read, answers with a
  MACed reply, and serves streams message by message, each MACed;
* a refusal that reads nothing, otherwise: ``UNAUTHENTICATED`` (a stranger, a replay,
  an unknown connection: the caller may :data:`REHANDSHAKE`) or ``RESOURCE_EXHAUSTED``
  (too large).  A caller refused for the wrong secret is logged once, by name, as the
  configuration error it is.

Example::

    gate = Gate("ps:0", auth, unary={"Pull": handler}, streams={"PushStream": push})
    server.add_generic_rpc_handlers((gate,))
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from distrib.rpc.auth import Authenticator, CallHeader, ConnectionKey, ReplayWindow

__all__ = ["Gate", "HANDSHAKE", "REHANDSHAKE", "MAX_MESSAGE_BYTES", "SERVICE", "HEADERS"]

SERVICE = "distrib.Task"
#: The method that opens a connection (reserved).
HANDSHAKE = "Handshake"
#: Marks a refusal after which the caller makes a new handshake and sends the call again.
REHANDSHAKE = "[handshake]"
#: The largest message (call body, reply, stream message) a task sends or accepts.
MAX_MESSAGE_BYTES = 1 << 30
#: The metadata keys: caller, connection, call header, stream header, hello token.
HEADERS = {"from": "x-distrib-from", "conn": "x-distrib-conn", "call": "x-distrib-call",
           "open": "x-distrib-open", "hello": "x-distrib-hello"}
_MAX_CONNECTIONS = 4096
_MAX_NONCES = 65536
_log = logging.getLogger("distrib.rpc")

Handler = Callable[[bytes, str], bytes]


class _Connection:
    def __init__(self, key: ConnectionKey, caller: str, peer: str) -> None:
        self.key = key
        self.caller = caller
        self.peer = peer
        self.window = ReplayWindow()


def _aborting(code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    """A handler that refuses a call without reading its body (served as a stream)."""
    def refuse(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        context.abort(code, details)
        yield b""  # unreachable: abort raises
    return grpc.stream_stream_rpc_method_handler(refuse)


class Gate(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Authenticates every call to one task's server, then runs its handler.

    Args:
        task: this task's name.
        auth: the cluster's authenticator.
        unary: method name -> handler, served as calls.
        streams: served name -> handler, served as streams (one handler call per message).
    """

    def __init__(self, task: str, auth: Authenticator, unary: dict[str, Handler],
                 streams: dict[str, Handler]) -> None:
        if HANDSHAKE in unary or HANDSHAKE in streams:
            raise ValueError(f"{HANDSHAKE} is reserved")
        self.task = task
        self._auth = auth
        self._unary = unary
        self._streams = streams
        self._lock = threading.Lock()
        self._connections: collections.OrderedDict[str, _Connection] = collections.OrderedDict()
        self._nonces: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        #: Refusals so far: (method, reason, the caller's claimed name) -> count.
        self.refusals: collections.Counter[tuple[str, str, str]] = collections.Counter()

    # ------------------------------------------------------------ dispatch
    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        method = str(handler_call_details.method)
        prefix = f"/{SERVICE}/"
        if not method.startswith(prefix):
            return None
        name = method[len(prefix):]
        meta = {str(k): v for k, v in handler_call_details.invocation_metadata}
        caller = str(meta.get(HEADERS["from"], "?"))[:100]
        if name == HANDSHAKE:
            return self._hello(caller, meta.get(HEADERS["hello"]))
        if name not in self._unary and name not in self._streams:
            return None
        with self._lock:
            conn_id = str(meta.get(HEADERS["conn"], ""))
            conn = self._connections.get(conn_id)
            if conn is not None:
                self._connections.move_to_end(conn_id)  # the least recently used go first
        if conn is None:
            return self._refuse(name, "unknown connection", caller, grpc.StatusCode.UNAUTHENTICATED,
                                f"{REHANDSHAKE} {self.task} does not know this connection "
                                "(it restarted, or forgot it): make a new handshake")
        if name in self._streams:
            counter = conn.key.parse_stream(name, meta.get(HEADERS["open"]))
            if counter is None or not conn.window.accept(counter):
                return self._refuse_forged(name, conn, counter)
            return grpc.stream_stream_rpc_method_handler(self._stream(name, conn, counter))
        header = conn.key.parse_call(name, meta.get(HEADERS["call"]))
        if header is None or not conn.window.accept(header.counter):
            return self._refuse_forged(name, conn, None if header is None else header.counter)
        if header.length > MAX_MESSAGE_BYTES:
            return self._refuse(name, "too large", conn.caller, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{self.task} refused a {name} call of {header.length} bytes: "
                                f"messages are limited to {MAX_MESSAGE_BYTES} bytes")
        return grpc.unary_unary_rpc_method_handler(self._call(name, conn, header))

    def _refuse_forged(self, name: str, conn: _Connection, counter: int | None
                       ) -> grpc.RpcMethodHandler:
        if counter is None:
            return self._refuse(name, "forged", conn.caller, grpc.StatusCode.UNAUTHENTICATED,
                                f"{self.task} refused a {name} call: its header was not made "
                                "with this connection's key")
        return self._refuse(name, "replayed", conn.caller, grpc.StatusCode.UNAUTHENTICATED,
                            f"{self.task} refused a {name} call: its counter ({counter}) was "
                            "used before (a replayed call)")

    def _count(self, name: str, reason: str, caller: str) -> bool:
        """Count a refusal; True for the first of its kind."""
        with self._lock:
            self.refusals[(name, reason, caller)] += 1
            return self.refusals[(name, reason, caller)] == 1

    def _refuse(self, name: str, reason: str, caller: str, code: grpc.StatusCode,
                details: str) -> grpc.RpcMethodHandler:
        if self._count(name, reason, caller) and reason != "unknown connection":
            _log.warning("%s", details + f" (caller claims to be {caller})")
        return _aborting(code, details)

    def refused(self, caller: str | None = None) -> int:
        """How many handshakes were refused for the wrong secret (from ``caller``, or anyone)."""
        with self._lock:
            return sum(n for (_, reason, who), n in self.refusals.items()
                       if reason == "wrong secret" and caller in (None, who))

    # ------------------------------------------------------------ handshake
    def _hello(self, caller: str, token: str | None) -> grpc.RpcMethodHandler:
        nonce = self._auth.check_hello(caller, self.task, token)
        if nonce is None:
            message = (f"{self.task} refused a connection from {caller}: its handshake was not "
                       f"made with {self.task}'s cluster secret. Every task of a cluster must "
                       "hold the same DISTRIB_CLUSTER_SECRET (and call this task by its name in "
                       f"the cluster, {self.task}). Fix: start the cluster with `distrib run`, "
                       f"or set the same DISTRIB_CLUSTER_SECRET on {self.task} and on {caller}.")
            if self._count(HANDSHAKE, "wrong secret", caller):
                _log.error("%s", message)
            return _aborting(grpc.StatusCode.UNAUTHENTICATED, message)
        with self._lock:
            replayed = nonce in self._nonces
            self._nonces[nonce] = None
            if len(self._nonces) > _MAX_NONCES:
                self._nonces.popitem(last=False)
        if replayed:
            return self._refuse(HANDSHAKE, "replayed", caller, grpc.StatusCode.UNAUTHENTICATED,
                                f"{self.task} refused a handshake from {caller}: its nonce was "
                                "used before (a replayed handshake)")

        def welcome(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
            key, reply = self._auth.welcome(nonce, caller, self.task)
            with self._lock:
                self._connections[key.conn_id] = _Connection(key, caller, context.peer())
                if len(self._connections) > _MAX_CONNECTIONS:
                    self._connections.popitem(last=False)
            yield reply
        return grpc.stream_stream_rpc_method_handler(welcome)

    # ------------------------------------------------------------ handlers
    def _moved(self, name: str, conn: _Connection, context: Any) -> None:
        if context.peer() != conn.peer:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          f"{REHANDSHAKE} {self.task} refused a {name} call: the connection's "
                          "key was made on another connection")

    def _call(self, name: str, conn: _Connection, header: CallHeader
              ) -> Callable[[bytes, Any], bytes]:
        fn = self._unary[name]

        def handle(body: bytes, context: Any) -> bytes:
            self._moved(name, conn, context)
            if not header.matches(body):
                self._count(name, "altered", conn.caller)
                context.abort(grpc.StatusCode.UNAUTHENTICATED,
                              f"{self.task} refused a {name} call: its body is not the one its "
                              "header was made for (altered in transit)")
            try:
                reply = fn(body, conn.caller)
            except Exception as exc:  # reported to the caller, who raises RemoteError
                context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                raise  # unreachable: abort raises
            return b"".join((conn.key.reply_mac(name, header.counter, reply), reply))
        return handle

    def _stream(self, name: str, conn: _Connection, counter: int
                ) -> Callable[[Iterator[bytes], Any], Iterator[bytes]]:
        fn = self._streams[name]

        def handle(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
            self._moved(name, conn, context)
            for index, message in enumerate(requests):
                body = conn.key.unseal(b"request", name, counter, index, message)
                if body is None:
                    self._count(name, "altered", conn.caller)
                    context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                  f"{self.task} refused message {index} of a {name} stream: "
                                  "it is not MACed with this stream's key and place (altered, "
                                  "replayed or reordered in transit)")
                    return
                try:
                    reply = fn(bytes(body), conn.caller)
                except Exception as exc:  # reported to the caller, who raises RemoteError
                    context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                    raise  # unreachable: abort raises
                yield conn.key.seal(b"reply", name, counter, index, reply)
        return handle
