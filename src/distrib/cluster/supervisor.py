"""Starting, watching and stopping child processes: the one supervisor every launcher uses.

distrib starts processes in three places — ``distrib run --cluster`` (every task of a
local cluster), the local replicas ``MirroredStrategy`` starts itself, and the
restarting supervisor of ``DISTRIB_MAX_RESTARTS`` — and all three start and stop them
here, the same way:

* :func:`start_process` starts a child that dies with its parent
  (``PR_SET_PDEATHSIG``; a child whose parent died before the request took effect
  exits at once), optionally in a process group of its own, so that stopping it also
  stops whatever it started;
* :func:`stop_processes` lets children finish on their own for a while (``patience``),
  then sends them a signal (SIGTERM), and SIGKILL after a grace period: it always
  returns with every child reaped;
* :func:`exit_reason` and :func:`exit_status` say how a child ended, in words and as
  a shell exit status;
* :func:`forwarding_signals` hands the supervisor's SIGINT and SIGTERM to its handler
  while it supervises.

Example:
    >>> exit_reason(3), exit_reason(-9), exit_status(-9)
    ('exited with status 3', 'was killed by signal 9 (SIGKILL)', 137)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import IO

__all__ = ["PREEMPTED", "exit_reason", "exit_status", "start_process", "signal_process",
           "stop_processes", "forwarding_signals"]

PREEMPTED = 42  # the status of a program that saved a checkpoint for a preemption
_PR_SET_PDEATHSIG = 1


def exit_reason(code: int) -> str:
    """How a process ended, in words (status 42 is a preemption save).

    Example:
        >>> exit_reason(42)
        'exited with status 42 (it saved a checkpoint for a preemption)'
    """
    if code == PREEMPTED:
        return f"exited with status {PREEMPTED} (it saved a checkpoint for a preemption)"
    if code >= 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown"
    return f"was killed by signal {-code} ({name})"


def exit_status(code: int) -> int:
    """A child's return code as a shell exit status (killed by signal N: 128 + N)."""
    return code if code >= 0 else 128 - code


def _child_setup(parent: int, own_group: bool, death_signal: int) -> None:  # pragma: no cover
    # runs in the child, between fork and exec
    if own_group:
        os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, death_signal)
    except OSError:
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def start_process(command: Sequence[str], env: Mapping[str, str] | None = None, *,
                  own_group: bool = True, death_signal: int = signal.SIGKILL,
                  stdin: int | IO[bytes] | None = None,
                  stdout: int | IO[bytes] | None = None,
                  stderr: int | IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` as a child that gets ``death_signal`` when this process dies.

    Args:
        command: the program and its arguments.
        env: its environment (default: this process's).
        own_group: run it in a process group of its own (signals to the group reach
            whatever it starts too); False keeps it in this process's group, so that a
            Ctrl-C in a terminal reaches it directly.
        death_signal: the signal it gets when the thread that started it ends.
        stdin, stdout, stderr: as for :class:`subprocess.Popen`.

    Example::

        proc = start_process([sys.executable, "train.py"], env, stdout=subprocess.PIPE)
    """
    parent = os.getpid()
    return subprocess.Popen(list(command), env=None if env is None else dict(env),
                            stdin=stdin, stdout=stdout, stderr=stderr,
                            preexec_fn=lambda: _child_setup(parent, own_group, death_signal))


def signal_process(proc: subprocess.Popen[bytes], sig: int, group: bool = True) -> None:
    """Send ``sig`` to ``proc`` (and its process group when it has one of its own)."""
    try:
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], sig: int = signal.SIGTERM,
                   grace: float = 10.0, *, patience: float = 0.0, group: bool = True) -> None:
    """Stop ``procs``: wait ``patience`` s for them to end, send ``sig``, SIGKILL after ``grace`` s.

    With ``group`` the signals go to each child's process group (children started with
    ``own_group=True``), so that processes a child left behind stop too, even after the
    child itself has ended. Returns when every child has been reaped.

    Example::

        stop_processes(children, grace=5.0)
    """
    _wait_all(procs, patience)
    for proc in procs:
        if group or proc.poll() is None:
            signal_process(proc, sig, group)
    _wait_all(procs, grace)
    for proc in procs:
        if group or proc.poll() is None:
            signal_process(proc, signal.SIGKILL, group)
    for proc in procs:
        proc.wait()


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


@contextlib.contextmanager
def forwarding_signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Within the block SIGINT and SIGTERM call ``handler`` (in the main thread; elsewhere
    Python cannot install handlers and nothing changes); the previous handlers after."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
