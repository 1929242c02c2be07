"""Restarting a failed job: the restart loop and the supervisor of local replicas.

Synchronous training needs every replica: when one dies (killed, an exception, or
exit 42 after saving for a preemption), the others are stopped — SIGTERM, then
SIGKILL after a grace period — and all of them are started again; the program
resumes from its latest checkpoint.  :func:`run_with_restarts` is that loop (used
by ``distrib run --cluster ... --max-restarts N``); :class:`LocalReplicaSupervisor`
runs it for the local replicas ``MirroredStrategy`` starts itself, when
``DISTRIB_MAX_RESTARTS`` is set: the process the user started then only supervises,
and every replica — 0 included — is a child it can restart.

Every restart and its reason is printed, and a summary at the end.

Example:
    >>> exit_reason(3), exit_reason(-9)
    ('exited with status 3', 'was killed by signal 9 (SIGKILL)')
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from distrib.cluster.env import get
from distrib.cluster.ports import free_ports
from distrib.cluster.supervisor import (
    PREEMPTED,
    exit_reason,
    exit_status,
    forwarding_signals,
    start_process,
    stop_processes,
)
from distrib.errors import ConfigError, explain

__all__ = ["exit_reason", "Attempt", "run_with_restarts", "max_restarts_from_env",
           "torchrun_restart",
           "LocalReplicaSupervisor", "supervise_local_replicas", "PREEMPTED",
           "MAX_RESTARTS_VARIABLE", "RESTART_COUNT_VARIABLE"]

MAX_RESTARTS_VARIABLE = "DISTRIB_MAX_RESTARTS"
RESTART_COUNT_VARIABLE = "DISTRIB_RESTART_COUNT"


@dataclass(frozen=True)
class Attempt:
    """How one run of the job ended.

    Attributes:
        code: the exit status to report (0: success).
        reason: which task failed and how (None on success).
        interrupted: stopped by the user or the scheduler (Ctrl-C, SIGTERM): no restart.
    """

    code: int
    reason: str | None = None
    interrupted: bool = False


def run_with_restarts(attempt: Callable[[int], Attempt], max_restarts: int,
                      note: Callable[[str], None]) -> int:
    """Run ``attempt(restart_number)`` until it succeeds, is interrupted, or restarts run out.

    Example::

        code = run_with_restarts(lambda n: Attempt(0), 2, print)   # 0, no restart
    """
    reasons: list[str] = []
    number = 0
    while True:
        result = attempt(number)
        if result.code == 0 or result.interrupted or number >= max_restarts:
            if reasons:
                outcome = "succeeded" if result.code == 0 else f"ended with status {result.code}"
                left = "" if result.code == 0 or result.interrupted else " (no restart left)"
                note(f"{outcome} after {number} restart(s){left}: " + "; ".join(
                    f"restart {i + 1}: {r}" for i, r in enumerate(reasons)))
            return result.code
        number += 1
        reason = result.reason or f"exited with status {result.code}"
        reasons.append(reason)
        note(f"{reason}; restarting every task (restart {number} of {max_restarts})")


def torchrun_restart() -> tuple[int, int] | None:
    """``(restart number, max restarts)`` under torchrun after a restart, else None."""
    count, limit = get("TORCHELASTIC_RESTART_COUNT"), get("TORCHELASTIC_MAX_RESTARTS")
    if count is None or not count.isdigit() or int(count) == 0:
        return None
    return int(count), int(limit) if limit is not None and limit.isdigit() else -1


def max_restarts_from_env() -> int:
    """``DISTRIB_MAX_RESTARTS`` (0 when unset)."""
    raw = get(MAX_RESTARTS_VARIABLE)
    if raw is None or raw == "":
        return 0
    if not raw.isdigit():
        raise ConfigError(explain(MAX_RESTARTS_VARIABLE, raw, "must be a non-negative integer",
                                  f"set e.g. {MAX_RESTARTS_VARIABLE}=2, or unset it"))
    return int(raw)


class LocalReplicaSupervisor:
    """Runs a program's ``L`` local replicas as children and restarts them all on a failure.

    Args:
        command: the program (this process's command line).
        local_world_size: ``L``.
        max_restarts: restarts allowed after the first run.
        grace_period: seconds between SIGTERM and SIGKILL when stopping replicas.

    Example::

        code = LocalReplicaSupervisor([sys.executable, "train.py"], 2, max_restarts=2).run()
    """

    def __init__(self, command: list[str], local_world_size: int, max_restarts: int,
                 grace_period: float = 10.0) -> None:
        self.command = command
        self.local_world_size = local_world_size
        self.max_restarts = max_restarts
        self.grace_period = grace_period
        self.children: list[subprocess.Popen[bytes]] = []
        self._signal: int | None = None

    def note(self, message: str) -> None:
        sys.stderr.write(f"distrib: {message}\n")
        sys.stderr.flush()

    def _start(self, number: int) -> None:
        port, = free_ports(1)
        self.children = []
        for rank in range(self.local_world_size):
            env = dict(os.environ)
            env.update({"DISTRIB_LOCAL_RANK": str(rank),
                        "DISTRIB_LOCAL_WORLD_SIZE": str(self.local_world_size),
                        "DISTRIB_MASTER_ADDR": "127.0.0.1", "DISTRIB_MASTER_PORT": str(port),
                        RESTART_COUNT_VARIABLE: str(number)})
            self.children.append(start_process(self.command, env, own_group=False))

    def _stop(self, sig: int) -> None:
        stop_processes(self.children, sig, self.grace_period, group=False)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signal = signum
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)

    def _attempt(self, number: int) -> Attempt:
        self._start(number)
        while self._signal is None:
            codes = [child.poll() for child in self.children]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                self._stop(signal.SIGTERM)
                return Attempt(exit_status(code),
                               f"local replica {rank} {exit_reason(code)}")
            if all(c == 0 for c in codes):
                return Attempt(0)
            time.sleep(0.05)
        self._stop(self._signal)
        codes = [child.returncode for child in self.children]
        code = PREEMPTED if codes and all(c == PREEMPTED for c in codes) else 128 + self._signal
        return Attempt(code, interrupted=True)

    def run(self) -> int:
        """Supervise until success, an interruption, or no restart is left; the exit status."""
        with forwarding_signals(self._on_signal):
            try:
                return run_with_restarts(self._attempt, self.max_restarts, self.note)
            finally:
                self._stop(signal.SIGKILL)


def supervise_local_replicas(command: list[str], local_world_size: int) -> None:
    """With ``DISTRIB_MAX_RESTARTS`` set, supervise the replicas and exit with their status.

    Returns (doing nothing) when the variable is unset or 0.
    """
    restarts = max_restarts_from_env()
    if restarts <= 0:
        return
    code = LocalReplicaSupervisor(command, local_world_size, restarts).run()
    sys.stdout.flush()
    sys.exit(code)
