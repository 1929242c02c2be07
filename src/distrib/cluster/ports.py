"""Free TCP ports for the processes of a cluster on one machine.

A port asked of the OS with ``bind(port 0)`` comes from its *ephemeral* range, the
range it also hands out to every other socket that binds port 0 or connects
without binding: gloo's pair listeners, TCPStore clients, any other program.  A
port chosen that way and released is free again for anyone, so between the
choice and the moment the store binds it, another job's gloo may have taken it —
and a worker then connects to a stranger, which fails far from the cause (gloo's
"Received data size doesn't match expected size").

:func:`free_ports` chooses below (or above) the ephemeral range, where the OS
never hands ports out on its own: only another program that picks the same port
on purpose could take it, and each choice is checked by binding it.

Example:
    >>> port, = free_ports(1)
    >>> low, high = ephemeral_port_range()
    >>> not low <= port <= high
    True
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where Linux keeps its ephemeral range ("32768\t60999" by default).
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Ports below this are left to well-known services.
_LOWEST = 10000
_TRIES = 200
_random = random.SystemRandom()  # a program's random.seed() must not make jobs agree


def ephemeral_port_range() -> tuple[int, int]:
    """The OS's ephemeral port range, both ends included (Linux's default elsewhere)."""
    try:
        low, high = (int(v) for v in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def candidate_ports(share: int = 0, shares: int = 1) -> range:
    """The ports :func:`free_ports` draws from: outside the ephemeral range.

    ``share`` of ``shares`` splits them into disjoint slices, for several launchers
    on one machine that must never pick the same port (e.g. parallel test workers).

    Example:
        >>> a, b = candidate_ports(0, 2), candidate_ports(1, 2)
        >>> a.stop <= b.start
        True
    """
    if not 0 <= share < shares:
        raise ValueError(f"share {share} is not one of {shares} shares (0 to {shares - 1})")
    low, high = ephemeral_port_range()
    below, above = range(_LOWEST, low), range(high + 1, 65536)
    ports = below if len(below) >= len(above) else above
    size = len(ports) // shares
    start = ports.start + share * size
    return range(start, start + size)


def free_ports(n: int, host: str = "127.0.0.1", share: int = 0, shares: int = 1) -> list[int]:
    """``n`` distinct ports that bind on ``host`` now, outside the ephemeral range.

    Falls back to ports from the OS (``bind`` to port 0) when no candidate binds
    after a few hundred tries, e.g. where the ephemeral range covers every port.
    """
    sockets: list[socket.socket] = []
    try:
        pool = candidate_ports(share, shares)
        for _ in range(_TRIES if len(pool) >= n else 0):
            if len(sockets) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, _random.choice(pool)))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        while len(sockets) < n:  # all open at once, so every port differs
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
