"""What ``ps:0`` keeps for an Estimator cluster (no processes: the handlers directly)."""

from __future__ import annotations

import json

import pytest

from distrib.estimator import RunConfig
from distrib.estimator.parameter_server import PsState
from distrib.estimator.ps_training import uses_ps
from distrib.rpc import wire

CLUSTER = {"chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:1"]}


def _call(handler, caller: str, **request):  # type: ignore[no-untyped-def]
    return wire.decode(handler(wire.encode(request), caller))


def test_the_global_step_counts_every_tasks_steps_and_a_new_run_starts_clean() -> None:
    state = PsState()
    handlers = {m: state.seen_by(h) for m, h in state.handlers().items()}
    assert _call(handlers["EstReady"], "worker:0")["ready"] is False
    _call(handlers["EstReady"], "chief:0", manifest=[["net/w", [2], "torch.float64"]], step=7)
    for task in ("chief:0", "worker:0", "worker:0"):
        reply = _call(handlers["EstStep"], task, add=1)
    assert reply["step"] == 10 and reply["finished"] is False and reply["failed"] is None
    _call(handlers["EstDone"], "worker:0")
    status = _call(handlers["EstStatus"], "chief:0")
    assert status["done"] == ["worker:0"] and set(status["silent"]) == {"chief:0", "worker:0"}
    assert _call(handlers["EstReady"], "chief:0", finish=True)["finished"] is True
    _call(handlers["EstReady"], "chief:0", fail="PeerLostError: Lost task ps:1")
    assert "ps:1" in _call(handlers["EstStep"], "worker:0")["failed"]
    state.reset()
    assert _call(handlers["EstStep"], "worker:0") == {
        "step": 0, "ready": False, "finished": False, "failed": None, "chief_silent": 0.0}


def test_only_chief_and_worker_tasks_without_a_strategy_train_against_ps_tasks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for task, expected in (("chief", True), ("worker", True), ("ps", False)):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER, "task": {
            "type": task, "index": 0}}))
        assert uses_ps(RunConfig()) is expected
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["h0:1"]},
                                                "task": {"type": "chief", "index": 0}}))
    assert uses_ps(RunConfig()) is False
