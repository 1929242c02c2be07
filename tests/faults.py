"""Fault injection for tests: run a launcher, watch its tasks' output, kill one with -9."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import clean_env

_PID = re.compile(r"^\[(?P<task>[^\]]+)\] pid (?P<pid>\d+)$")
_STEP = re.compile(r"^\[(?P<task>[^\]]+)\] step (?P<step>\d+)$")


@dataclass
class Run:
    """The outcome of :func:`run_with_kill`."""

    returncode: int
    stdout: str
    stderr: str
    pids: set[int] = field(default_factory=set)
    killed: int | None = None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids: set[int], seconds: float = 15.0) -> list[int]:
    """The pids still alive after waiting up to ``seconds`` for them to go."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def run_with_kill(args: list[str], cwd: Path, task: str | None = None, step: int = 0,
                  sig: int = signal.SIGKILL, timeout: float = 400) -> Run:
    """Run ``python -m distrib.launch <args>``; send ``sig`` to ``task`` when it prints ``step``.

    The program prints ``pid <n>`` and ``step <k>`` lines (the launcher prefixes
    ``[task] ``).  The signal is sent once, in the first run of the job.
    """
    proc = subprocess.Popen([sys.executable, "-m", "distrib.launch", *args], cwd=cwd,
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    pids: dict[str, int] = {}
    seen: set[int] = set()
    state: dict[str, int | None] = {"killed": None}

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            text = line.rstrip("\n")
            found = _PID.match(text)
            if found:
                pids[found["task"]] = int(found["pid"])
                seen.add(int(found["pid"]))
            found = _STEP.match(text)
            if found and task is not None and state["killed"] is None and \
                    found["task"] == task and int(found["step"]) >= step and task in pids:
                state["killed"] = pids[task]
                os.kill(pids[task], sig)

    def read_err() -> None:
        assert proc.stderr is not None
        err.extend(proc.stderr)

    threads = [threading.Thread(target=read_out), threading.Thread(target=read_err)]
    for t in threads:
        t.start()
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for t in threads:
            t.join(timeout=10)
    return Run(proc.returncode, "".join(out), "".join(err), seen, state["killed"])
