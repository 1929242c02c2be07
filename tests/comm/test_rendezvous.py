"""The rendezvous store: bound to one address, and reached within the timeout or named.

In-process checks with real sockets and real torch stores (no peers needed): the
store listens only on the address it is given; the client's check that a store answers
(the store's own ping) works against this torch's store, so a torch that changes the
store's protocol fails here first; a silent program, a closed port and an unresolvable
name each end in an error naming the address.
"""

from __future__ import annotations

import socket
import threading

import pytest

from distrib.comm.rendezvous import connect_store, host_store, listening_socket
from distrib.errors import ConfigError, PeerLostError


def test_the_store_listens_on_the_given_address_only() -> None:
    store = host_store("127.0.0.1", 0, world_size=2, timeout=5)
    assert store.host == "127.0.0.1"
    client = connect_store("127.0.0.1", store.port, 5, "the test store")
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_a_listening_socket_is_bound_to_its_address() -> None:
    with listening_socket("127.0.0.1", 0) as sock:
        assert sock.getsockname()[0] == "127.0.0.1"


def test_hosting_on_a_foreign_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"rendezvous address = '192\.0\.2\.1:2222'"):
        host_store("192.0.2.1", 2222, world_size=2, timeout=2)


def test_hosting_on_a_taken_port_names_it() -> None:
    with listening_socket("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"another program already uses port {port}"):
            host_store("127.0.0.1", port, world_size=2, timeout=2)


def test_a_silent_program_on_the_port_is_named() -> None:
    server = listening_socket("127.0.0.1", 0)
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            while True:
                held.append(server.accept()[0])
        except OSError:
            return

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    try:
        with pytest.raises(PeerLostError) as info:
            connect_store("127.0.0.1", port, 1, "the store of chief:0", lost=["chief:0"])
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert f"the store of chief:0 at 127.0.0.1:{port} within 1 s" in str(info.value)
    assert "another program holds this port" in str(info.value)
    assert info.value.lost == ["chief:0"]


def test_a_closed_port_and_an_unknown_host_are_named() -> None:
    with listening_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
    with pytest.raises(PeerLostError, match="nothing answered there"):
        connect_store("127.0.0.1", port, 1, "the store")
    with pytest.raises(PeerLostError, match="no-such-host.invalid:2222.*does not resolve"):
        connect_store("no-such-host.invalid", 2222, 1, "the store")
