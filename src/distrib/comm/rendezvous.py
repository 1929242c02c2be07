"""The rendezvous store: hosted on this task's own address, reached within the timeout.

The chief (rank 0) hosts torch's ``TCPStore``; every other process connects to it.
Two things here differ from torch's defaults:

* **Bound to one address.**  torch's store listens on every interface.  distrib
  binds a listening socket to the chief's address as the cluster spec names it
  (``127.0.0.1`` for local replicas) and hands it to the store, so nothing of
  distrib is reachable on the machine's other addresses.
* **Bounded start-up.**  torch's client retries past its timeout and waits
  without limit on a peer that accepts the connection but never answers.  Here
  the client first resolves the host, connects and checks that a store answers
  (the store's own ``PING``), all within one deadline, and raises an error that
  names the address and what was expected there.

Example (two processes)::

    store = host_store("127.0.0.1", 0, world_size=2, timeout=10)  # chief: store.port
    store = connect_store("127.0.0.1", port, timeout=10,
                          expected="the rendezvous store of chief:0")  # the other one
"""

from __future__ import annotations

import datetime
import errno
import os
import queue
import socket
import struct
import threading
import time
from typing import Any

import torch.distributed as dist

from distrib.errors import ConfigError, PeerLostError, explain

__all__ = ["host_store", "connect_store", "listening_socket", "probe_store"]

# The store's wire protocol (torch/csrc/distributed/c10d/TCPStoreBackend.hpp):
# a VALIDATE query with the magic number, then a PING whose nonce the store echoes.
_VALIDATE, _PING, _MAGIC = 0, 13, 0x3C85F7CE
_RETRY_SECONDS = 0.25


class _NoAnswer(Exception):
    """The peer accepted the connection but did not answer as a store."""


def _resolve(host: str, port: int, deadline: float, flags: int = 0) -> list[Any]:
    """``getaddrinfo`` with a deadline (a stuck DNS lookup runs on in a helper thread)."""
    out: queue.Queue[Any] = queue.Queue(1)

    def lookup() -> None:
        try:
            out.put(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=flags))
        except OSError as exc:
            out.put(exc)

    threading.Thread(target=lookup, name="distrib-resolve", daemon=True).start()
    try:
        result = out.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        raise TimeoutError(f"resolving {host!r} took longer than the timeout") from None
    if isinstance(result, OSError):
        raise result
    return list(result)


def listening_socket(host: str, port: int, timeout: float = 30.0) -> socket.socket:
    """A TCP socket listening on ``host:port`` only (port 0: the OS chooses).

    Example:
        >>> s = listening_socket("127.0.0.1", 0)
        >>> s.getsockname()[0]
        '127.0.0.1'
        >>> s.close()
    """
    deadline = time.monotonic() + timeout
    error: OSError = OSError(errno.EADDRNOTAVAIL, f"no address for {host!r}")
    for family, kind, proto, _, addr in _resolve(host, port, deadline, socket.AI_PASSIVE):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(socket.SOMAXCONN)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def host_store(host: str, port: int, world_size: int, timeout: float) -> dist.TCPStore:
    """Host the rendezvous store on ``host:port`` only (port 0: the OS chooses one).

    Raises:
        ConfigError: the address is not one of this machine's, or the port is taken.

    Example::

        store = host_store("127.0.0.1", 0, world_size=2, timeout=30)
        store.port          # the port the other replicas connect to
    """
    try:
        sock = listening_socket(host, port, timeout)
    except (OSError, TimeoutError) as exc:
        taken = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
        raise ConfigError(explain(
            "rendezvous address", f"{host}:{port}",
            "this process is the chief and must host the rendezvous store there, but "
            + (f"another program already uses port {port}" if taken else
               f"could not listen on it ({exc})"),
            "free the port or choose another one in the cluster configuration"
            if taken else "give this task an address of this machine in the cluster "
            "configuration (its IP address or a name that resolves to it)")) from exc
    bound_host, bound_port = sock.getsockname()[:2]
    return dist.TCPStore(bound_host, bound_port, world_size=world_size, is_master=True,
                         timeout=datetime.timedelta(seconds=timeout),
                         wait_for_workers=False, master_listen_fd=sock.detach(),
                         use_libuv=True)


def probe_store(sock: socket.socket, deadline: float) -> None:
    """Check that the peer on ``sock`` answers as a store (its ``PING``), before ``deadline``.

    Raises:
        _NoAnswer: the peer closed, stayed silent or answered something else.
    """
    nonce = os.getpid() & 0xFFFFFFFF
    sock.sendall(struct.pack("=BIBI", _VALIDATE, _MAGIC, _PING, nonce))
    reply = b""
    while len(reply) < 4:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _NoAnswer("it accepted the connection but never answered")
        sock.settimeout(left)
        try:
            chunk = sock.recv(4 - len(reply))
        except TimeoutError:
            continue
        except OSError as exc:
            raise _NoAnswer(f"the connection failed ({exc})") from exc
        if not chunk:
            raise _NoAnswer("it closed the connection without answering")
        reply += chunk
    if struct.unpack("=I", reply)[0] != nonce:
        raise _NoAnswer("it answered, but not as a rendezvous store does")


_FIX_START = ("start every task of the cluster (the chief first or at the same time), or raise "
              "CommunicationOptions(timeout_seconds=...)")
_FIX_NAME = "check the host name in the cluster configuration (a typo, or a name this machine's DNS does not know)"
_FIX_FOREIGN = ("check that this address in the cluster configuration is the chief's, and stop the "
                "other program or give the chief another port")


class _Unreachable(Exception):
    """Why the store could not be reached, and the fix."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _reach(host: str, port: int, deadline: float) -> tuple[str, int]:
    """Connect to a store at ``host:port`` and check it answers; the address that worked."""
    last = _Unreachable("no attempt was made", _FIX_START)
    while True:
        try:
            infos = _resolve(host, port, deadline)
        except (OSError, TimeoutError) as exc:
            last = _Unreachable(f"the host name does not resolve ({exc})", _FIX_NAME)
            infos = []
        for family, kind, proto, _, addr in infos:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                with socket.socket(family, kind, proto) as sock:
                    sock.settimeout(min(left, 5.0))
                    sock.connect(addr)
                    probe_store(sock, deadline)
                    return str(addr[0]), int(addr[1])
            except _NoAnswer as exc:
                last = _Unreachable(f"another program holds this port: {exc}", _FIX_FOREIGN)
            except OSError as exc:
                last = _Unreachable(f"nothing answered there ({exc.strerror or exc})",
                                    _FIX_START)
        if time.monotonic() + _RETRY_SECONDS >= deadline:
            raise last
        time.sleep(_RETRY_SECONDS)


def connect_store(host: str, port: int, timeout: float, expected: str,
                  lost: list[str] | None = None) -> dist.TCPStore:
    """Connect to the store at ``host:port``, giving up after ``timeout`` seconds.

    Args:
        host, port: the store's address.
        timeout: seconds to wait for it (the store's later operations use it too).
        expected: what should answer there, for the error
            (``"the rendezvous store hosted by chief:0"``).
        lost: the task names to report as lost when nothing answers.

    Raises:
        PeerLostError: nothing answered there in time, or something else did.

    Example::

        store = connect_store("10.0.0.1", 2222, 30, "the rendezvous store of chief:0")
    """
    start = time.monotonic()
    deadline = start + timeout
    try:
        addr, port_ = _reach(host, port, deadline)
    except _Unreachable as exc:
        raise PeerLostError(
            f"Could not reach {expected} at {host}:{port} within {timeout:g} s: "
            f"{exc.reason}. Fix: {exc.fix}.", lost=lost) from None
    left = max(1.0, deadline - time.monotonic())
    store = dist.TCPStore(addr, port_, is_master=False,
                          timeout=datetime.timedelta(seconds=left), wait_for_workers=False)
    store.set_timeout(datetime.timedelta(seconds=timeout))
    return store
