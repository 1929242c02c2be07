"""The transport: data format, authentication, binding, lost peers (servers in this process)."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
import torch

from distrib.errors import ConfigError, PeerLostError, RemoteError, UsageError
from distrib.rpc import gate, pickling, transport, wire
from distrib.rpc.auth import Authenticator, ConnectionKey, ReplayWindow
from distrib.rpc.transport import RpcClient, RpcServer
from tests.support import free_port


def test_data_messages_carry_tensors_as_raw_buffers_and_nothing_else() -> None:
    value = {"w": torch.arange(6.0).reshape(2, 3), "n": (1, 2.5, float("inf"), None, "s"),
             "a": np.arange(3, dtype=np.int32), 7: [True, b"raw"],
             "e": torch.zeros(0, 4), "h": torch.tensor(3, dtype=torch.bfloat16)}
    out = wire.decode(wire.encode(value))
    assert torch.equal(out["w"], value["w"]) and out["n"] == value["n"]
    assert out["a"].tolist() == [0, 1, 2] and out[7] == [True, b"raw"]
    assert out["e"].shape == (0, 4) and out["h"].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="cannot travel between tasks as data"):
        wire.encode(object())
    with pytest.raises(ValueError, match="not a distrib RPC message"):
        wire.decode(b"\x80\x04pickle")


def test_pickled_messages_keep_tensors_out_of_the_pickle_stream() -> None:
    net = torch.nn.Linear(3, 2)
    blob = pickling.dumps((net, lambda x: net(x) * 2))
    assert net.weight.detach().numpy().tobytes() in blob  # raw bytes beside the stream
    copy, fn = pickling.loads(blob)
    assert torch.equal(copy.weight, net.weight) and isinstance(copy.weight, torch.nn.Parameter)
    assert torch.allclose(fn(torch.ones(1, 3)), net(torch.ones(1, 3)) * 2)


RIGHT, WRONG = "the-right-secret-0123", "the-wrong-secret-0123"


def _connect(a: Authenticator, b: Authenticator) -> tuple[ConnectionKey, ConnectionKey]:
    """The client's and the server's key of one handshake (``a`` calls, ``b`` answers)."""
    nonce, hello = a.hello("chief:0", "ps:0")
    assert b.check_hello("chief:0", "ps:0", hello) == nonce
    server, welcome = b.welcome(nonce, "chief:0", "ps:0")
    client = a.accept_welcome(nonce, welcome, "chief:0", "ps:0")
    assert client is not None
    return client, server


def test_every_call_is_authenticated_over_its_whole_body_with_its_connection_key() -> None:
    client, server = _connect(Authenticator(RIGHT), Authenticator(RIGHT))
    token = client.call_token("Run", 7, b"code")
    header = server.parse_call("Run", token)
    assert header is not None and header.counter == 7 and header.matches(b"code")
    assert not header.matches(b"c0de")                         # altered in flight
    assert server.parse_call("Install", token) is None         # replayed as another call
    other, _ = _connect(Authenticator(RIGHT), Authenticator(RIGHT))
    assert other.parse_call("Run", token) is None              # another connection's key
    assert server.parse_call("Run", token.replace("7.", "8.", 1)) is None  # another counter
    data = server.parse_call("Push", client.call_token("Push", 8, b"gradients"))
    assert data is not None and not data.matches(b"gradientz")
    mac = server.reply_mac("Run", 7, b"reply")
    assert mac == client.reply_mac("Run", 7, b"reply") != client.reply_mac("Run", 8, b"reply")


def test_a_handshake_proves_the_secret_both_ways_and_stream_messages_keep_their_place() -> None:
    right, wrong = Authenticator(RIGHT), Authenticator(WRONG)
    nonce, hello = wrong.hello("worker:1", "ps:0")
    assert right.check_hello("worker:1", "ps:0", hello) is None    # a caller without it
    assert right.check_hello("worker:2", "ps:0", right.hello("worker:1", "ps:0")[1]) is None
    nonce, hello = right.hello("chief:0", "ps:0")
    _, welcome = wrong.welcome(nonce, "chief:0", "ps:0")
    assert right.accept_welcome(nonce, welcome, "chief:0", "ps:0") is None  # a callee without
    client, server = _connect(right, right)
    sealed = client.seal(b"request", "PushStream", 3, 0, b"grads")
    assert bytes(server.unseal(b"request", "PushStream", 3, 0, sealed) or b"") == b"grads"
    assert server.unseal(b"request", "PushStream", 3, 1, sealed) is None   # replayed later
    assert server.unseal(b"request", "PushStream", 4, 0, sealed) is None   # another stream
    assert server.unseal(b"reply", "PushStream", 3, 0, sealed) is None     # reflected back
    altered = sealed[:-1] + b"Z"
    assert server.unseal(b"request", "PushStream", 3, 0, altered) is None
    window = ReplayWindow(size=8)
    assert [window.accept(c) for c in (1, 2, 2, 20, 12, 13, 13, 5)] == [
        True, True, False, True, False, True, False, False]


def test_a_secret_shorter_than_16_bytes_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="at least 16 bytes.*secrets.token_hex") as info:
        Authenticator("short-secret")
    assert "short-secret" not in str(info.value)   # the secret itself is never shown
    Authenticator("x" * 16)


def _serve(secret: str, address: str) -> RpcServer:
    server = RpcServer("ps:0", address, Authenticator(secret),
                       {"Echo": lambda body, caller: body,
                        "Fail": lambda body, caller: 1 / 0},  # type: ignore[dict-item]
                       code_methods=frozenset({"Echo"}))
    server.start()
    return server


def test_callers_without_the_secret_are_rejected() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve(RIGHT, address)
    try:
        good = RpcClient("chief:0", "ps:0", address, Authenticator(RIGHT), timeout=10)
        assert good.call("Echo", b"hi", code=True) == b"hi"
        bad = RpcClient("chief:0", "ps:0", address, Authenticator(WRONG), timeout=10)
        with pytest.raises(ConfigError, match="ps:0 refused chief:0's connection: the two "
                           "hold different cluster secrets"):
            bad.call("Echo", b"hi", code=True)
        with pytest.raises(RemoteError, match="ZeroDivisionError"):
            good.call("Fail", b"")
    finally:
        server.stop()


def test_a_server_binds_only_its_own_address() -> None:
    port = free_port()
    server = _serve(RIGHT, f"127.0.0.1:{port}")
    try:
        with socket.socket() as other:  # the same port on another loopback address is free
            other.bind(("127.0.0.2", port))
        with pytest.raises(ConfigError, match="could not"):
            _serve(RIGHT, f"127.0.0.1:{port}")  # and the address itself cannot be shared
    finally:
        server.stop()


def test_a_lost_peer_is_named_within_the_deadline() -> None:
    client = RpcClient("chief:0", "ps:3", f"127.0.0.1:{free_port()}", Authenticator(RIGHT),
                       timeout=2)
    with pytest.raises(PeerLostError, match="Lost task ps:3") as info:
        client.call("Echo", b"")
    assert info.value.lost == ["ps:3"]


def _serve_streams(address: str, handler_seconds: float = 0.0) -> RpcServer:
    def echo(body: bytes, caller: str) -> bytes:
        time.sleep(handler_seconds)
        return bytes(body) + caller.encode()

    server = RpcServer("ps:0", address, Authenticator(RIGHT),
                       {"Echo": echo, "Fail": lambda body, caller: 1 / 0},  # type: ignore[dict-item]
                       stream_methods=frozenset({"Echo", "Fail"}))
    server.start()
    return server


def test_a_stream_carries_requests_and_replies_in_turn() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve_streams(address)
    try:
        stream = RpcClient("worker:0", "ps:0", address, Authenticator(RIGHT),
                           timeout=10).stream("Echo")
        for i in range(3):
            stream.send(b"%d:" % i)  # returns at once; the reply is taken later
            assert stream.receive() == b"%d:worker:0" % i
        stream.close()
        with pytest.raises(PeerLostError, match="closed its stream"):
            stream.send(b"late")
    finally:
        server.stop()


def test_a_stream_without_the_secret_or_with_a_failing_handler_fails_clearly() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve_streams(address)
    try:
        bad = RpcClient("worker:0", "ps:0", address, Authenticator(WRONG), timeout=10)
        with pytest.raises(ConfigError, match="ps:0 refused worker:0's connection: the two "
                           "hold different cluster secrets"):
            bad.stream("Echo")     # the handshake, before the stream opens
        good = RpcClient("worker:0", "ps:0", address, Authenticator(RIGHT), timeout=10)
        failing = good.stream("Fail")
        failing.send(b"")
        with pytest.raises(RemoteError, match="ZeroDivisionError"):
            failing.receive()
    finally:
        server.stop()


def test_a_stream_reply_that_does_not_come_names_the_task_within_the_timeout() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve_streams(address, handler_seconds=4.0)
    try:
        stream = RpcClient("worker:0", "ps:0", address, Authenticator(RIGHT),
                           timeout=1).stream("Echo")
        stream.send(b"x")
        with pytest.raises(PeerLostError, match="did not answer Echo within 1 s") as info:
            stream.receive()
        assert info.value.lost == ["ps:0"]
    finally:
        server.stop(grace=0.0)


def test_code_never_travels_on_a_stream() -> None:
    with pytest.raises(ValueError, match="carries code"):
        RpcServer("ps:0", f"127.0.0.1:{free_port()}", Authenticator(RIGHT),
                  {"Run": lambda body, caller: body}, code_methods=frozenset({"Run"}),
                  stream_methods=frozenset({"Run"}))


def test_a_task_that_restarted_gets_a_new_handshake_and_the_call_once_more() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve_streams(address)
    client = RpcClient("worker:0", "ps:0", address, Authenticator(RIGHT), timeout=10)
    try:
        assert client.call("Echo", b"1:") == b"1:worker:0"
        stream = client.stream("Echo")
        stream.send(b"2:")
        assert stream.receive() == b"2:worker:0"
        stream.close()
        server.stop(grace=0.0)
        server = _serve_streams(address)   # a new process: it knows no connection key
        assert client.call("Echo", b"3:") == b"3:worker:0"
        assert server.gate.refusals[("Echo", "unknown connection", "worker:0")] == 1
        server.stop(grace=0.0)
        server = _serve_streams(address)
        stream = client.stream("Echo")     # a stream's first message is sent again too
        stream.send(b"4:")
        assert stream.receive() == b"4:worker:0"
        assert server.gate.refusals[("EchoStream", "unknown connection", "worker:0")] == 1
        stream.close()
    finally:
        client.close()
        server.stop(grace=0.0)


def test_a_message_over_the_size_limit_is_refused_from_its_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"127.0.0.1:{free_port()}"
    seen: list[int] = []
    server = RpcServer("ps:0", address, Authenticator(RIGHT),
                       {"Push": lambda body, caller: seen.append(len(body)) or b""})
    server.start()
    client = RpcClient("worker:0", "ps:0", address, Authenticator(RIGHT), timeout=10)
    try:
        monkeypatch.setattr(gate, "MAX_MESSAGE_BYTES", 1000)      # the task's limit
        with pytest.raises(UsageError, match="messages are limited to 1000 bytes"):
            client.call("Push", bytes(2000))
        assert seen == [] and server.gate.refusals[("Push", "too large", "worker:0")] == 1
        monkeypatch.setattr(transport, "MAX_MESSAGE_BYTES", 1000)  # the caller's own limit
        with pytest.raises(UsageError, match="'2000 bytes': messages between tasks are limited"):
            client.call("Push", bytes(2000))
        assert server.gate.refusals[("Push", "too large", "worker:0")] == 1  # never sent
        client.call("Push", bytes(1000))
        assert seen == [1000]
    finally:
        client.close()
        server.stop(grace=0.0)
