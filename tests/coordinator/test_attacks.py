"""The sniffing attacker on loopback: replayed, re-used, forged and altered calls are refused.

The threat the security guide assumes: someone who reads the cluster's traffic and can
open connections to its tasks (and, for the altered bodies, change bytes in flight).
The attacker here sees exactly what crosses the network — a TCP relay records the
bytes, a client interceptor shows the same calls decoded — and never the secret.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from distrib.errors import ConfigError, RemoteError
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.service import TaskService
from distrib.rpc.transport import RpcClient, RpcServer
from tests.coordinator.helpers import PROGRAMS
from tests.support import clean_env, free_port

SECRET = "a-cluster-secret-0123456789"
AUTH = Authenticator(SECRET)
#: The unauthenticated push of the memory test (a ps that read it would grow by as much).
HUGE = 512 << 20


class Relay:
    """A TCP relay in front of a task: records what crosses it, may alter it in flight.

    ``alter`` changes what the caller sends; ``alter_replies`` what the task answers.
    """

    def __init__(self, target: str, alter: Callable[[bytes], bytes] | None = None,
                 alter_replies: Callable[[bytes], bytes] | None = None) -> None:
        self.target = target
        self.alter = alter
        self.alter_replies = alter_replies
        self.sent = bytearray()       # every byte the caller sent, in order
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                caller, _ = self._listener.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            task = socket.create_connection((host, int(port)))
            threading.Thread(target=self._pump, args=(caller, task, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(task, caller, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outgoing: bool) -> None:
        change = self.alter if outgoing else self.alter_replies
        try:
            while data := src.recv(1 << 20):
                if outgoing:
                    self.sent += data
                dst.sendall(change(data) if change is not None else data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


class Sniffer(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
              grpc.StreamStreamClientInterceptor):
    """What a reader of the traffic learns, decoded: each call's method, metadata and body."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[tuple[str, str], ...], bytes]] = []
        self.streams: list[tuple[str, tuple[tuple[str, str], ...], list[bytes]]] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.calls.append((details.method, tuple(details.metadata or ()), bytes(request)))
        return continuation(details, request)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        messages: list[bytes] = []
        self.streams.append((details.method, tuple(details.metadata or ()), messages))

        def record() -> Iterator[bytes]:
            for message in requests:
                messages.append(bytes(message))
                yield message
        return continuation(details, record())

    def last(self, method: str) -> tuple[tuple[tuple[str, str], ...], bytes]:
        metadata, body = [(m, b) for name, m, b in self.calls if name.endswith("/" + method)][-1]
        return metadata, body


class Counting:
    """Handlers that keep what they ran."""

    def __init__(self) -> None:
        self.runs: list[bytes] = []
        self.pushes: list[bytes] = []

    def run(self, body: bytes, caller: str) -> bytes:
        self.runs.append(bytes(body))
        return b"ran"

    def push(self, body: bytes, caller: str) -> bytes:
        self.pushes.append(bytes(body))
        return b"applied"


def _worker(address: str, handlers: Counting) -> RpcServer:
    server = RpcServer("worker:0", address, AUTH, {"Run": handlers.run, "Push": handlers.push},
                       code_methods=frozenset({"Run"}), stream_methods=frozenset({"Push"}))
    server.start()
    return server


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for something the server does in the background (not a bound on its speed)."""
    for _ in range(1200):
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _refused(server: RpcServer, method: str) -> int:
    return sum(n for (name, _, _), n in server.gate.refusals.items() if name == method)


def test_a_connection_replayed_byte_for_byte_runs_nothing_again() -> None:
    address, handlers = f"127.0.0.1:{free_port()}", Counting()
    server = _worker(address, handlers)
    relay = Relay(address)
    try:
        chief = RpcClient("chief:0", "worker:0", relay.address, AUTH, timeout=10)
        assert chief.call("Run", b"closure: train one step", code=True) == b"ran"
        stream = chief.stream("Push")
        for step in range(3):
            stream.send(b"gradient %d" % step)
            assert stream.receive() == b"applied"
        stream.close()
        assert len(handlers.runs) == 1 and len(handlers.pushes) == 3
        # The attacker opens its own connection and sends every captured byte again:
        # the handshake, the Run call, the push stream's opening and its three messages.
        with socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1]))) as sock:
            sock.sendall(bytes(relay.sent))
            _until(lambda: _refused(server, "Run") > 0 and _refused(server, "PushStream") > 0,
                   "the replayed calls reached the worker")
        assert len(handlers.runs) == 1 and len(handlers.pushes) == 3   # nothing ran again
        reasons = {reason for (_, reason, _) in server.gate.refusals}
        assert reasons == {"replayed"}, reasons
        chief.close()
    finally:
        relay.close()
        server.stop(grace=0.0)


def test_a_captured_call_or_stream_header_is_refused_on_a_new_connection() -> None:
    address, handlers = f"127.0.0.1:{free_port()}", Counting()
    server = _worker(address, handlers)
    sniffer = Sniffer()
    try:
        chief = RpcClient("chief:0", "worker:0", address, AUTH, timeout=10,
                          interceptors=[sniffer])
        chief.call("Run", b"closure", code=True)
        stream = chief.stream("Push")
        stream.send(b"gradient")
        stream.receive()
        metadata, body = sniffer.last("Run")
        method, open_metadata, messages = sniffer.streams[-1]
        attacker = grpc.insecure_channel(address)
        run = attacker.unary_unary("/distrib.Task/Run")
        for forged in (body, b"closure: something else"):
            with pytest.raises(grpc.RpcError) as info:
                run(forged, metadata=metadata, timeout=10)        # replayed / altered body
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        pushes = attacker.stream_stream(method)(
            iter([messages[0], b"\0" * 32 + b"forged gradient"]), metadata=open_metadata)
        with pytest.raises(grpc.RpcError) as info:
            list(pushes)                                          # a re-used stream header
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert handlers.runs == [b"closure"] and handlers.pushes == [b"gradient"]
        stream.send(b"gradient 2")                                # the real ones carry on
        assert stream.receive() == b"applied"
        assert chief.call("Run", b"closure 2", code=True) == b"ran"
        attacker.close()
        chief.close()
    finally:
        server.stop(grace=0.0)


def test_a_forged_beat_of_another_session_is_refused_and_changes_nothing() -> None:
    address = f"127.0.0.1:{free_port()}"
    forgotten: list[int] = []
    ps = TaskService("ps:0", address, "chief:0", AUTH, 30.0, {},
                     on_new_session=lambda: forgotten.append(1))
    served = threading.Thread(target=ps.serve, daemon=True)
    served.start()
    sniffer = Sniffer()
    chief = RpcClient("chief:0", "ps:0", address, AUTH, timeout=10, interceptors=[sniffer])
    chief.ensure_ready(30, "start the ps")
    chief.call("Hello", wire.encode({"session": "a" * 32}))
    chief.call("Beat", wire.encode({"session": "a" * 32}))
    assert forgotten == [1]
    metadata, body = sniffer.last("Beat")
    forged = body.replace(b"a" * 32, b"b" * 32)                  # same length, other session
    assert len(forged) == len(body) and forged != body
    attacker = grpc.insecure_channel(address)
    for message in (forged, body):
        with pytest.raises(grpc.RpcError) as info:
            attacker.unary_unary("/distrib.Task/Beat")(message, metadata=metadata, timeout=10)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    hello_metadata, _ = sniffer.last("Handshake")
    with pytest.raises(grpc.RpcError) as info:                  # a replayed handshake
        attacker.unary_unary("/distrib.Task/Handshake")(b"", metadata=hello_metadata, timeout=10)
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert forgotten == [1]                                      # the ps forgot nothing
    chief.call("Beat", wire.encode({"session": "a" * 32}))      # the real chief carries on
    chief.call("Shutdown", wire.encode({"session": "a" * 32}))
    served.join(30)
    assert not served.is_alive()
    attacker.close()
    chief.close()


def test_bodies_altered_in_flight_are_refused_before_they_run() -> None:
    address, handlers = f"127.0.0.1:{free_port()}", Counting()
    server = _worker(address, handlers)

    def alter(data: bytes) -> bytes:     # the attacker changes bytes of calls in flight
        return data.replace(b"lr=0.1", b"lr=9.9").replace(b"grad+1", b"grad-1")
    relay = Relay(address, alter)
    try:
        chief = RpcClient("chief:0", "worker:0", relay.address, AUTH, timeout=10)
        with pytest.raises(ConfigError, match="altered in transit"):
            chief.call("Run", b"closure with lr=0.1", code=True)
        stream = chief.stream("Push")
        stream.send(b"grad+1")
        with pytest.raises(ConfigError, match="altered, replayed or reordered in transit"):
            stream.receive()
        assert handlers.runs == [] and handlers.pushes == []
        assert chief.call("Run", b"closure with lr=0.2", code=True) == b"ran"  # untouched
        chief.close()
    finally:
        relay.close()
        server.stop(grace=0.0)


def test_replies_altered_in_flight_are_refused_by_the_caller() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = RpcServer("ps:0", address, AUTH, {"Pull": lambda body, caller: b"value=1.000"},
                       stream_methods=frozenset({"Pull"}))
    server.start()
    relay = Relay(address, alter_replies=lambda data: data.replace(b"value=1.000",
                                                                   b"value=7.000"))
    try:
        worker = RpcClient("worker:0", "ps:0", relay.address, AUTH, timeout=10)
        with pytest.raises(RemoteError, match="reply of ps:0 to Pull was altered in transit"):
            worker.call("Pull", b"")
        stream = worker.stream("Pull")
        stream.send(b"")
        with pytest.raises(RemoteError, match="Pull stream was altered in transit"):
            stream.receive()
        worker.close()
    finally:
        relay.close()
        server.stop(grace=0.0)


def test_an_unauthenticated_huge_push_is_refused_before_its_body_is_read() -> None:
    address = f"127.0.0.1:{free_port()}"
    ps = subprocess.Popen([sys.executable, str(PROGRAMS / "lone_ps.py"), address, SECRET],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=clean_env())
    assert ps.stdin is not None and ps.stdout is not None
    try:
        ready, start_kib = ps.stdout.readline().split()
        assert ready == "ready"
        sniffer = Sniffer()
        worker = RpcClient("worker:0", "ps:0", address, AUTH, timeout=30, interceptors=[sniffer])
        assert worker.call("Push", b"small") == b"ok"
        stream = worker.stream("Push")
        stream.send(b"small")
        assert stream.receive() == b"ok"
        captured, _ = sniffer.last("Push")
        _, opened, _ = sniffer.streams[-1]
        huge = bytes(HUGE)
        attacker = grpc.insecure_channel(address)
        push = attacker.unary_unary("/distrib.Task/Push")
        for metadata in ((), captured, (("x-distrib-conn", "0" * 32),)):
            with pytest.raises(grpc.RpcError) as info:   # no header, a replayed one, a guess
                push(huge, metadata=metadata, timeout=60)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as info:       # a re-used stream header
            list(attacker.stream_stream("/distrib.Task/PushStream")(iter([huge]),
                                                                    metadata=opened))
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        del huge
        ps.stdin.write("peak\n")
        ps.stdin.flush()
        peak_kib, pushed = (int(v) for v in ps.stdout.readline().split())
        assert pushed == 2 * len(b"small")               # only the real pushes were read
        assert (peak_kib - int(start_kib)) * 1024 < HUGE // 4, (peak_kib, start_kib)
        attacker.close()
        worker.close()
    finally:
        ps.stdin.write("stop\n")
        ps.stdin.close()
        ps.wait(60)
        ps.stdout.close()
