"""Start-up is not silence: tasks that start seconds apart still meet under a short timeout.

A communication timeout of a few seconds notices a lost task quickly once a cluster
runs; it must not fail a cluster whose tasks start a few seconds apart, or whose ``ps``
answers its first set-up call slowly (servers in this process).
"""

from __future__ import annotations

import threading
import time

import pytest

from distrib.errors import PeerLostError
from distrib.rpc import wire
from distrib.rpc.auth import Authenticator
from distrib.rpc.coordination import ClusterClient
from distrib.rpc.service import TaskService
from distrib.rpc.transport import STARTUP_SECONDS, RpcClient, startup_timeout
from tests.support import free_port

TIMEOUT = 1.5   # above the chief's heartbeat interval (1 s)
AUTH = Authenticator("a-test-secret-of-16+-bytes")


class Served:
    """``service.serve()`` in a thread; ``error`` is what it raised (None: still serving or done)."""

    def __init__(self, service: TaskService) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(service,), daemon=True)
        self.thread.start()

    def _run(self, service: TaskService) -> None:
        try:
            service.serve()
        except BaseException as e:  # noqa: BLE001 - checked by the test
            self.error = e


def test_the_start_up_allowance_is_at_least_180_seconds_or_the_timeout() -> None:
    assert STARTUP_SECONDS == 180.0
    assert startup_timeout(TIMEOUT) == 180.0 and startup_timeout(600.0) == 600.0


def test_a_ps_that_starts_after_the_timeout_is_waited_for_and_waits_for_its_chief() -> None:
    address = f"127.0.0.1:{free_port()}"
    chief = ClusterClient("chief:0", [("ps:0", address)], [], AUTH, timeout=TIMEOUT)
    connected = threading.Event()
    threading.Thread(target=lambda: (chief.connect_ps(), connected.set()), daemon=True).start()
    time.sleep(2 * TIMEOUT)                  # the chief waits past its timeout ...
    assert not connected.is_set()
    ps = TaskService("ps:0", address, "chief:0", AUTH, TIMEOUT, {})
    served = Served(ps)                      # ... for a ps that starts late
    assert connected.wait(30), "the chief stopped waiting for a ps that started late"
    time.sleep(2 * TIMEOUT)                  # heartbeats keep the session alive
    assert served.error is None and served.thread.is_alive()
    chief.shutdown()
    served.thread.join(30)
    assert not served.thread.is_alive() and served.error is None


def test_a_ps_waits_for_its_first_chief_past_the_timeout_then_notices_silence_within_it(
        ) -> None:
    address = f"127.0.0.1:{free_port()}"
    served = Served(TaskService("ps:0", address, "chief:0", AUTH, TIMEOUT, {}))
    time.sleep(2 * TIMEOUT)                  # no chief yet: start-up, not silence
    assert served.error is None and served.thread.is_alive()
    client = RpcClient("chief:0", "ps:0", address, AUTH, timeout=10)
    client.call("Hello", wire.encode({"session": "s1"}))   # one contact, then silence
    served.thread.join(30)   # the allowance (180 s) would leave it serving here
    assert isinstance(served.error, PeerLostError) and served.error.lost == ["chief:0"]
    assert "stopped sending heartbeats" in str(served.error)
    assert "(communication timeout 2 s)" in str(served.error)   # not the start-up allowance
    client.close()


def test_a_set_up_call_slower_than_the_timeout_succeeds_with_the_allowance() -> None:
    address = f"127.0.0.1:{free_port()}"
    ps = TaskService("ps:0", address, "chief:0", AUTH, 60.0,
                     {"Slow": lambda body, caller: (time.sleep(2 * TIMEOUT), body)[1]})
    served = Served(ps)
    client = RpcClient("chief:0", "ps:0", address, AUTH, timeout=TIMEOUT)
    client.ensure_ready(startup_timeout(TIMEOUT), "start the ps")
    with pytest.raises(PeerLostError, match="did not answer Slow within"):
        client.call("Slow", b"x")                              # the communication timeout
    assert client.call("Slow", b"x", timeout=startup_timeout(TIMEOUT)) == b"x"
    client.call("Shutdown", wire.encode({"session": "none"}))
    served.thread.join(30)
    client.close()
