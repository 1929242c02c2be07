"""The transport: data format, authentication, binding, lost peers (servers in this process)."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
import torch

from distrib.errors import ConfigError, PeerLostError, RemoteError
from distrib.rpc import pickling, wire
from distrib.rpc.auth import Authenticator
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


def test_code_messages_are_authenticated_over_their_whole_body() -> None:
    auth = Authenticator("secret")
    token = auth.sign("Run", b"code", full=True)
    assert auth.verify("Run", b"code", token, full=True)
    assert not auth.verify("Run", b"c0de", token, full=True)       # altered in flight
    assert not auth.verify("Install", b"code", token, full=True)   # replayed as another call
    assert not Authenticator("other").verify("Run", b"code", token, full=True)
    data = auth.sign("Push", b"gradients", full=False)
    assert not auth.verify("Push", b"gradientz", data, full=False)  # CRC-32 of the body


def _serve(secret: str, address: str) -> RpcServer:
    server = RpcServer("ps:0", address, Authenticator(secret),
                       {"Echo": lambda body, caller: body,
                        "Fail": lambda body, caller: 1 / 0},  # type: ignore[dict-item]
                       code_methods=frozenset({"Echo"}))
    server.start()
    return server


def test_callers_without_the_secret_are_rejected() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve("right", address)
    try:
        good = RpcClient("chief:0", "ps:0", address, Authenticator("right"), timeout=10)
        assert good.call("Echo", b"hi", code=True) == b"hi"
        bad = RpcClient("chief:0", "ps:0", address, Authenticator("wrong"), timeout=10)
        with pytest.raises(ConfigError, match="rejected this task's call"):
            bad.call("Echo", b"hi", code=True)
        with pytest.raises(RemoteError, match="ZeroDivisionError"):
            good.call("Fail", b"")
    finally:
        server.stop()


def test_a_server_binds_only_its_own_address() -> None:
    port = free_port()
    server = _serve("s", f"127.0.0.1:{port}")
    try:
        with socket.socket() as other:  # the same port on another loopback address is free
            other.bind(("127.0.0.2", port))
        with pytest.raises(ConfigError, match="could not"):
            _serve("s", f"127.0.0.1:{port}")  # and the address itself cannot be shared
    finally:
        server.stop()


def test_a_lost_peer_is_named_within_the_deadline() -> None:
    client = RpcClient("chief:0", "ps:3", f"127.0.0.1:{free_port()}", Authenticator("s"),
                       timeout=2)
    with pytest.raises(PeerLostError, match="Lost task ps:3") as info:
        client.call("Echo", b"")
    assert info.value.lost == ["ps:3"]


def _serve_streams(address: str, handler_seconds: float = 0.0) -> RpcServer:
    def echo(body: bytes, caller: str) -> bytes:
        time.sleep(handler_seconds)
        return bytes(body) + caller.encode()

    server = RpcServer("ps:0", address, Authenticator("right"),
                       {"Echo": echo, "Fail": lambda body, caller: 1 / 0},  # type: ignore[dict-item]
                       stream_methods=frozenset({"Echo", "Fail"}))
    server.start()
    return server


def test_a_stream_carries_requests_and_replies_in_turn() -> None:
    address = f"127.0.0.1:{free_port()}"
    server = _serve_streams(address)
    try:
        stream = RpcClient("worker:0", "ps:0", address, Authenticator("right"),
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
        bad = RpcClient("worker:0", "ps:0", address, Authenticator("wrong"), timeout=10)
        stream = bad.stream("Echo")
        stream.send(b"x")
        with pytest.raises(ConfigError, match="rejected this task's call"):
            stream.receive()
        assert stream.closed
        good = RpcClient("worker:0", "ps:0", address, Authenticator("right"), timeout=10)
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
        stream = RpcClient("worker:0", "ps:0", address, Authenticator("right"),
                           timeout=1).stream("Echo")
        stream.send(b"x")
        with pytest.raises(PeerLostError, match="did not answer Echo within 1 s") as info:
            stream.receive()
        assert info.value.lost == ["ps:0"]
    finally:
        server.stop(grace=0.0)


def test_code_never_travels_on_a_stream() -> None:
    with pytest.raises(ValueError, match="carries code"):
        RpcServer("ps:0", f"127.0.0.1:{free_port()}", Authenticator("s"),
                  {"Run": lambda body, caller: body}, code_methods=frozenset({"Run"}),
                  stream_methods=frozenset({"Run"}))
