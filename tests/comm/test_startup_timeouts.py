"""Start-up waits end within the configured timeout, with an error naming the address.

A worker whose chief's address is held by a program that never answers, has nothing
listening, or does not resolve, and a chief whose worker never starts: each raises a
distrib error that names the address (or the missing task) and what was expected there.
Durations are reported by the program but not asserted (no wall-clock bounds in tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "startup_failures.py")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    proc = run_python([PROGRAM, "3"], env=clean_env(OMP_NUM_THREADS="1"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


pytestmark = pytest.mark.slow


def test_a_chief_address_held_by_a_silent_program_is_named(report: dict[str, Any]) -> None:
    kind, message, _ = report["foreign"]
    assert kind == "PeerLostError"
    assert "rendezvous store hosted by chief:0" in message and "127.0.0.1:" in message
    assert "another program holds this port" in message and "within 3 s" in message


def test_an_absent_chief_is_named_with_its_address(report: dict[str, Any]) -> None:
    kind, message, _ = report["absent"]
    assert kind == "PeerLostError"
    assert "chief:0" in message and "nothing answered there" in message
    assert "start every task of the cluster" in message


def test_an_unresolvable_chief_host_is_named(report: dict[str, Any]) -> None:
    kind, message, _ = report["unresolvable"]
    assert kind == "PeerLostError"
    assert "no-such-host.invalid:2222" in message and "does not resolve" in message
    assert "check the host name" in message


def test_a_chief_whose_worker_never_starts_names_the_worker(report: dict[str, Any]) -> None:
    kind, message, _ = report["lonely_chief"]
    assert kind == "PeerLostError"
    assert message.startswith("worker:0 (rank 1/2) did not join the group within 3 s")
