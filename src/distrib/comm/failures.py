"""What one replica tells the others when it fails or ends: through the rendezvous store.

Replicas are separate processes, so when one raises inside a collective call
(``fit``, ``evaluate``, a custom loop) the others only see a connection closing.  So
that they can say *what* happened, every replica process keeps here:

* the collective calls it made (``Model.fit``, ``Model.evaluate``, ...: the step
  engine notes each one, :func:`note_call`);
* on an exception inside one, :func:`report_failure` writes the exception and the
  call to the store; the heartbeat thread of every other replica reads it within a
  second (:func:`watch`).  Unless every replica raised in that call (the same error
  everywhere) within five seconds, the failed replica then aborts its side of the
  process group, so that the others' pending collective ends at once, with
  :class:`~distrib.errors.ReplicaFailedError` naming the replica and its exception;
* at the end of the program, :func:`publish_end` writes whether it ended normally and
  its last call, so that a replica left alone in a call (``evaluate`` on the chief
  only) raises :class:`~distrib.errors.UnmatchedCallError` naming the replica that
  did not make it.

Example::

    failures.note_call("Model.evaluate")
    try:
        run_steps()
    except Exception as exc:
        failures.report_failure(exc)
        raise
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from distrib.errors import (
    DistribError,
    PeerLostError,
    ReplicaFailedError,
    UnmatchedCallError,
)

__all__ = ["note_call", "current_call", "report_failure", "attach", "detach", "watch",
           "publish_end", "peer_error"]

_FAILED = "distrib/failed/"
_FAILURES = "distrib/failures"
_ENDED = "distrib/ended/"
_ALL_RAISED_SECONDS = 5.0  # how long a failed replica waits to see whether all raised


class _Record:
    """This process's side: its group, its calls, and a peer's failure once seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.store: Any = None
        self.rank = 0
        self.world_size = 1
        self.describe: Callable[[int], str] = lambda r: f"rank {r}"
        self.call: str | None = None
        self.calls = 0
        self.failures_seen = 0
        self.peer_failure: ReplicaFailedError | None = None
        self.reported = False
        self.abort: Callable[[], None] = lambda: None


_record = _Record()


def attach(store: Any, rank: int, world_size: int, describe: Callable[[int], str],
           abort: Callable[[], None]) -> None:
    """Record this process's group (the communicator does it when it joins); ``abort``
    ends the group's pending and future collectives on this process."""
    with _record.lock:
        _record.store, _record.rank, _record.world_size = store, rank, world_size
        _record.describe, _record.abort = describe, abort
        _record.failures_seen, _record.peer_failure, _record.reported = 0, None, False


def detach() -> None:
    """Forget the group (the communicator left it)."""
    with _record.lock:
        _record.store = None


def note_call(name: str) -> None:
    """Note that this replica starts the collective call ``name`` (``"Model.fit"``)."""
    _record.call = name
    _record.calls += 1
    _record.reported = False


def current_call() -> str | None:
    """The collective call this replica made last (None before any)."""
    return _record.call


def _text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def report_failure(exc: BaseException) -> None:
    """Tell the other replicas that this one raised ``exc`` (once per call): an error that
    only reports another replica's failure counts as raised, and is not told."""
    store = _record.store
    if store is None or _record.reported:
        return
    _record.reported = True
    key = f"{_FAILURES}/{_record.calls}"  # the replicas that raised in this call
    if isinstance(exc, (PeerLostError, UnmatchedCallError)):  # another replica's failure
        with contextlib.suppress(Exception):
            store.add(key, 1)
        return
    try:
        store.set(f"{_FAILED}{_record.rank}", f"{_record.call or 'the program'}\n{_text(exc)}")
        store.add(_FAILURES, 1)
        # Did every replica raise in this call (the same error everywhere: nobody waits)?
        raised = int(store.add(key, 1))
        deadline = time.monotonic() + _ALL_RAISED_SECONDS
        while raised < _record.world_size and time.monotonic() < deadline:
            time.sleep(0.05)
            raised = int(store.add(key, 0))
    except Exception:  # the store is gone: the others diagnose a lost task instead
        raised = 0
    if raised < _record.world_size:  # some replica waits in a collective: end it now
        _record.abort()


def watch(store: Any) -> None:
    """One look for a failure another replica reported (the heartbeat calls it); a store
    that cannot be read says nothing here (the heartbeat finds that out itself)."""
    try:
        _watch(store)
    except Exception:
        return


def _watch(store: Any) -> None:
    count = int(store.add(_FAILURES, 0))
    if count <= _record.failures_seen or _record.peer_failure is not None:
        return
    _record.failures_seen = count
    for r in range(_record.world_size):
        if r == _record.rank or not store.check([f"{_FAILED}{r}"]):
            continue
        call, _, text = store.get(f"{_FAILED}{r}").decode().partition("\n")
        who = _record.describe(r)
        _record.peer_failure = ReplicaFailedError(
            f"{who} raised {text} in {call}, so every replica stopped ("
            f"{_record.describe(_record.rank)} was waiting for it in a collective). Fix: "
            f"correct the error on {who} (its traceback is in its output); every replica "
            "must run each step without error.", lost=[who], replica=r, original=text)
        return


def publish_end() -> None:
    """Write how this replica's program ended and its last call (at interpreter exit)."""
    store = _record.store
    if store is None:
        return
    last = getattr(sys, "last_value", None)
    status = f"with an uncaught {type(last).__name__}" if last is not None else "normally"
    try:
        store.set(f"{_ENDED}{_record.rank}",
                  f"{status}\n{_record.calls}\n{_record.call or 'no collective call'}")
    except Exception:  # the store is gone with the chief: nothing to tell
        return


def peer_error(what: str) -> DistribError | None:
    """Why a collective failed, when another replica said so: its exception, or that it
    ended its program without making this replica's call; None when nothing was said."""
    store = _record.store
    if store is not None and _record.peer_failure is None:
        watch(store)
    if _record.peer_failure is not None:
        return _record.peer_failure
    if store is None:
        return None
    me, call = _record.describe(_record.rank), _record.call or what
    for r in range(_record.world_size):
        if r == _record.rank:
            continue
        try:
            if not store.check([f"{_ENDED}{r}"]):
                continue
            status, calls, last = store.get(f"{_ENDED}{r}").decode().split("\n", 2)
        except Exception:
            return None
        who = _record.describe(r)
        if calls == str(_record.calls):  # the same calls: this one went on after them
            return UnmatchedCallError(
                f"{who} ended its program {status} after its last collective call ({last}), "
                f"while {me} was still running collectives ({what}) after it. Fix: make "
                "every replica run the same collectives: code after the call that runs "
                "steps or reductions on some replicas only must run on all.",
                replica=r, call=call)
        return UnmatchedCallError(
            f"{call} on {me} needs every replica to make the same call, but {who} ended its "
            f"program {status} after {calls} collective call(s), the last {last}, without "
            f"calling {call}. Fix: call {call} on every replica (not only on the chief, e.g. "
            "inside `if is_chief:`), or run it after training in a separate single-process "
            "program.", replica=r, call=call)
    return None
