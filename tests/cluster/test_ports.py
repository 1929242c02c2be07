"""Free ports for a cluster on one machine come from outside the OS's ephemeral range."""

from __future__ import annotations

import random
import socket

import pytest

from distrib.cluster import ports
from distrib.cluster.ports import candidate_ports, ephemeral_port_range, free_ports


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_port_range()
    chosen = free_ports(8)
    assert len(set(chosen)) == 8
    assert all(not low <= p <= high for p in chosen)
    for port in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_seeded_random_module_does_not_make_two_launchers_agree() -> None:
    random.seed(0)
    first = free_ports(4)
    random.seed(0)
    assert free_ports(4) != first


def test_shares_are_disjoint_slices_of_the_candidates() -> None:
    slices = [candidate_ports(i, 3) for i in range(3)]
    assert all(len(s) > 1000 for s in slices)
    assert slices[0].stop <= slices[1].start and slices[1].stop <= slices[2].start
    assert all(p in slices[1] for p in free_ports(5, share=1, shares=3))
    with pytest.raises(ValueError, match="share 3 is not one of 3 shares"):
        candidate_ports(3, 3)


def test_a_taken_candidate_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spare.bind(("127.0.0.1", 0))
        busy, free = taken.getsockname()[1], spare.getsockname()[1]
        spare.close()
        monkeypatch.setattr(ports, "candidate_ports", lambda share, shares: [busy, free])
        # The taken candidate fails to bind and is passed over for the free one.
        assert free_ports(1) == [free]


def test_an_unreadable_range_file_gives_linuxs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_RANGE_FILE", ports.Path("/nonexistent/ip_local_port_range"))
    assert ephemeral_port_range() == (32768, 60999)
    assert candidate_ports().start == 10000 and candidate_ports().stop == 32768
