"""Several closures in one call: the worker runs them in order and stops at the first error;
the chief's queue hands them out oldest first and takes back what did not run."""

from __future__ import annotations

import contextlib
from typing import Any

from distrib.coordinator.cluster_coordinator import _Closure, _ClosureQueue
from distrib.coordinator.values import RemoteValue
from distrib.rpc import pickling, wire
from distrib.rpc.executor import ClosureExecutor
from distrib.rpc.variables import VariableClient

RAN: list[int] = []


def _record(i: int) -> int:
    RAN.append(i)
    if i == 1:
        raise ValueError(f"closure {i} failed")
    return i * 10


def _call(executor: ClosureExecutor, blobs: list[bytes]) -> Any:
    envelope = {"incarnation": executor.incarnation, "blobs": blobs, "seq": None, "gen": 0,
                "deadline": None}
    return wire.decode(executor.handlers()["Run"](wire.encode(envelope), "chief:0"))


def test_a_worker_runs_the_closures_of_a_call_in_order_and_stops_at_the_first_error() -> None:
    executor = ClosureExecutor(0, VariableClient([], track_changes=True),
                               resolve_special=lambda ref: None, context=contextlib.nullcontext)
    RAN.clear()
    blobs = [pickling.dumps({"fn": _record, "args": (i,), "kwargs": {}}) for i in range(3)]
    outcomes = _call(executor, blobs)["ok"]
    assert RAN == [0, 1]  # closure 2 never ran: cancelled, as queued closures are
    assert outcomes[0] == {"ok": 0}
    assert outcomes[1]["error"]["type"] == "ValueError"
    assert outcomes[1]["error"]["message"] == "closure 1 failed"
    assert len(outcomes) == 2
    assert _call(executor, blobs[:1])["ok"] == [{"ok": 0}]


def test_the_queue_hands_out_the_oldest_closures_and_takes_back_the_rest_in_order() -> None:
    queue = _ClosureQueue()
    closures = [_Closure(bytes([i]), RemoteValue()) for i in range(6)]
    for closure in closures:
        queue.put(closure)
    first = queue.get(timeout=1.0, limit=4)
    assert [c.blob for c in first] == [bytes([i]) for i in range(4)]
    assert queue.inflight == 4
    queue.put_back(first[2:])  # two did not run: first in line again, in their order
    assert queue.inflight == 2
    again = queue.get(timeout=1.0, limit=4)
    assert [c.blob for c in again] == [bytes([i]) for i in (2, 3, 4, 5)]
    assert queue.get(timeout=0.01, limit=4) == []
