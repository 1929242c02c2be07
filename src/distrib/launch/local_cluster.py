"""``distrib run --cluster "chief=1,worker=2"``: every task of a TF_CONFIG cluster on this machine.

Each task is one process running the same program, with its own ``TF_CONFIG``
(addresses on 127.0.0.1, free ports outside the OS's ephemeral range, see
:mod:`distrib.cluster.ports`).  Their output is streamed
line by line with a ``[worker:1] `` prefix.  The launcher

* gives every task the same fresh secret (``DISTRIB_CLUSTER_SECRET``, kept if set)
  with which the tasks of a parameter-server cluster authenticate each other;
* succeeds when every chief, worker and evaluator task has exited with status
  0 (``ps`` tasks may serve forever: they are then stopped);
* stops every other task as soon as one fails, and exits with that task's
  status, naming it (``task worker:1 exited with status 3``);
* passes Ctrl-C / SIGTERM on to every task;
* leaves no process behind: each task runs in its own process group, which is
  sent SIGTERM, then SIGKILL after a grace period, and dies with the launcher
  (``PR_SET_PDEATHSIG``) if the launcher is killed.

Example:
    >>> parse_cluster_arg("chief=1,worker=2")
    {'chief': 1, 'worker': 2}
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import IO

from distrib.cluster.env import (
    CLUSTER_SECRET,
    LOCAL_REPLICA_VARIABLES,
    TORCHRUN_VARIABLES,
    child_environment,
    cluster_secret,
    get,
)
from distrib.cluster.ports import free_ports
from distrib.cluster.restarts import exit_reason
from distrib.cluster.roles import TASK_TYPES, suggest, validate_cluster_wide
from distrib.errors import ConfigError, explain

__all__ = ["parse_cluster_arg", "local_cluster", "LocalClusterLauncher", "describe_status"]

_EXAMPLE = "e.g. --cluster chief=1,worker=2"
_MUST_SUCCEED = ("chief", "worker", "evaluator")


def _item(item: str, jobs: dict[str, int]) -> tuple[str, int]:
    job, sep, count = (p.strip() for p in item.partition("="))
    if not sep:
        raise ConfigError(explain("--cluster", item, "each entry must be JOB=COUNT",
                                  f"write '{job}=1' ({_EXAMPLE})"))
    if job not in TASK_TYPES:
        raise ConfigError(explain("--cluster", job, "unknown job" + suggest(job, TASK_TYPES),
                                  "use the jobs chief, worker, ps and evaluator"))
    if job in jobs:
        raise ConfigError(explain("--cluster", job, "a job is given twice",
                                  "give each job once"))
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(explain(f"--cluster {job}", count, "the number of tasks must be a "
                                  "positive integer", f"write e.g. {job}=1, or leave the job out"))
    return job, int(count)


def parse_cluster_arg(text: str) -> dict[str, int]:
    """Read ``"chief=1,worker=2,ps=1,evaluator=1"`` into ``{job: number of tasks}``.

    Raises:
        ConfigError: the text is malformed (the message names the entry and the fix).

    Example:
        >>> parse_cluster_arg("worker=2, evaluator=1")
        {'worker': 2, 'evaluator': 1}
    """
    jobs: dict[str, int] = {}
    if not text.strip():
        raise ConfigError(explain("--cluster", text, "must list the tasks as JOB=COUNT "
                                  "entries separated by commas", _EXAMPLE))
    for item in text.split(","):
        job, count = _item(item, jobs)
        jobs[job] = count
    if jobs.get("chief", 0) > 1:
        raise ConfigError(explain("--cluster chief", jobs["chief"], "There must be at most "
                                  "one 'chief' job (task)", "use chief=1 and more workers"))
    if jobs.get("evaluator", 0) > 1:
        raise ConfigError(explain("--cluster evaluator", jobs["evaluator"], "There must be at "
                                  "most one 'evaluator' task", "use evaluator=1"))
    if not any(job in jobs for job in ("chief", "worker")):
        raise ConfigError(explain("--cluster", text, "the cluster has no training task "
                                  "(no chief and no worker)", f"add workers, {_EXAMPLE}"))
    return jobs


def local_cluster(jobs: dict[str, int], host: str = "127.0.0.1") -> dict[str, list[str]]:
    """A TF_CONFIG ``cluster`` for ``jobs`` on ``host`` (free ports, see ``cluster.ports``).

    Example:
        >>> sorted(local_cluster({"worker": 2}))
        ['worker']
    """
    ports = iter(free_ports(sum(jobs.values()), host))
    order = [job for job in TASK_TYPES if job in jobs]
    cluster = {job: [f"{host}:{next(ports)}" for _ in range(jobs[job])] for job in order}
    validate_cluster_wide(cluster)
    return cluster


def describe_status(code: int) -> str:
    """``"exited with status 3"`` or ``"was killed by signal 9 (SIGKILL)"``.

    Example:
        >>> describe_status(3), describe_status(-15)
        ('exited with status 3', 'was killed by signal 15 (SIGTERM)')
    """
    return exit_reason(code)


def _child_setup(parent: int) -> None:  # pragma: no cover - runs in the child before exec
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the launcher
    except OSError:
        pass
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


@dataclass
class _Task:
    name: str
    job: str
    proc: subprocess.Popen[bytes]
    pumps: list[threading.Thread] = field(default_factory=list)


class LocalClusterLauncher:
    """Start, stream, supervise and stop the tasks of a local TF_CONFIG cluster.

    Args:
        jobs: ``{job: number of tasks}``, e.g. ``{"chief": 1, "worker": 2}``.
        command: the program every task runs (``[python, script, args...]``).
        grace_period: seconds between SIGTERM and SIGKILL when stopping tasks.

    Example::

        launcher = LocalClusterLauncher({"worker": 2}, [sys.executable, "train.py"])
        status = launcher.run()      # 0 when every task succeeded
    """

    def __init__(self, jobs: dict[str, int], command: list[str],
                 grace_period: float = 10.0, extra_env: dict[str, str] | None = None) -> None:
        self.cluster = local_cluster(jobs)
        self.command = command
        self.grace_period = grace_period
        self.extra_env = dict(extra_env or {})
        self.failure: str | None = None  # after run(): which task failed, and how
        self.interrupted = False  # after run(): stopped by Ctrl-C / SIGTERM
        # Every task of the cluster proves it belongs to it with this secret (the
        # parameter-server runtime authenticates its calls with it).
        self.secret = cluster_secret() or secrets.token_hex(32)
        self.tasks: list[_Task] = []
        self._signal: int | None = None
        self._lock = threading.Lock()
        self._out: IO[str] = sys.stdout
        self._err: IO[str] = sys.stderr

    # ----------------------------------------------------------------- output
    def _write(self, stream: IO[str], data: bytes) -> None:
        with self._lock:
            try:
                buffer = getattr(stream, "buffer", None)
                if buffer is not None:
                    stream.flush()
                    buffer.write(data)
                    buffer.flush()
                else:
                    stream.write(data.decode(errors="replace"))
                    stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def note(self, message: str) -> None:
        """Print a launcher message (``distrib run: ...``) on stderr."""
        self._write(self._err, f"distrib run: {message}\n".encode())

    @staticmethod
    def note_to_stderr(message: str) -> None:
        """Print a launcher message when no launcher is running (between restarts)."""
        sys.stderr.write(f"distrib run: {message}\n")
        sys.stderr.flush()

    def _pump(self, stream: IO[bytes], prefix: bytes, sink: IO[str]) -> None:
        for line in iter(stream.readline, b""):
            self._write(sink, prefix + (line if line.endswith(b"\n") else line + b"\n"))
        stream.close()

    # ------------------------------------------------------------- processes
    def _env(self, job: str, index: int) -> dict[str, str]:
        tf_config = json.dumps({"cluster": self.cluster, "task": {"type": job, "index": index}})
        extra = {"TF_CONFIG": tf_config, CLUSTER_SECRET: self.secret, **self.extra_env}
        if get("PYTHONUNBUFFERED") is None:
            extra["PYTHONUNBUFFERED"] = "1"
        if get("OMP_NUM_THREADS") is None:
            # The tasks share this machine's cores: give each its share, not all of them.
            tasks = sum(len(a) for j, a in self.cluster.items() if j != "ps") or 1
            extra["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // tasks))
        return child_environment(extra, remove=(*TORCHRUN_VARIABLES, *LOCAL_REPLICA_VARIABLES))

    def start(self) -> None:
        """Start every task (all processes first, then the output threads)."""
        parent = os.getpid()
        for job, addresses in self.cluster.items():
            for index in range(len(addresses)):
                if self._signal is not None:
                    break
                proc = subprocess.Popen(
                    self.command, env=self._env(job, index), stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    preexec_fn=lambda: _child_setup(parent))
                self.tasks.append(_Task(f"{job}:{index}", job, proc))
        for task in self.tasks:
            prefix = f"[{task.name}] ".encode()
            for stream, sink in ((task.proc.stdout, self._out), (task.proc.stderr, self._err)):
                assert stream is not None
                thread = threading.Thread(target=self._pump, args=(stream, prefix, sink),
                                          daemon=True)
                thread.start()
                task.pumps.append(thread)

    def _signal_groups(self, sig: int) -> None:
        for task in self.tasks:
            try:
                os.killpg(task.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to every task's process group; SIGKILL what is left after the grace period."""
        self._signal_groups(sig)
        deadline = time.monotonic() + self.grace_period
        for task in self.tasks:
            try:
                task.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._signal_groups(signal.SIGKILL)  # also any process a task left in its group
        for task in self.tasks:
            task.proc.wait()
        for task in self.tasks:
            for thread in task.pumps:
                thread.join(timeout=5)

    # ------------------------------------------------------------ supervision
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is None:
            self._signal = signum
            self._signal_groups(signum)
        else:  # a second Ctrl-C: no more waiting
            self._signal_groups(signal.SIGKILL)

    def _supervise(self) -> _Task | None:
        """Wait until every task that must succeed has, or one fails; returns the failed one."""
        while self._signal is None:
            running = False
            for task in self.tasks:
                code = task.proc.poll()
                if code is not None and code != 0:
                    return task
                running |= code is None and task.job in _MUST_SUCCEED
            if not running:
                return None
            time.sleep(0.05)
        return None

    def run(self) -> int:
        """Start the cluster and supervise it; returns the launcher's exit status."""
        handlers = {}
        failed: _Task | None = None
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self.note("starting " + ", ".join(f"{job}:{i} at {addr}" for job, addrs in
                                               self.cluster.items()
                                               for i, addr in enumerate(addrs)))
            self.start()
            failed = self._supervise()
            if failed is not None:
                self.note(f"task {failed.name} {describe_status(failed.proc.returncode)}; "
                          "stopping the other tasks")
        finally:
            self.stop(self._signal or signal.SIGTERM)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        if self._signal is not None:
            self.interrupted = True
            self.note(f"stopped every task on {signal.Signals(self._signal).name}")
            return 128 + self._signal
        if failed is not None:
            code = failed.proc.returncode
            self.failure = f"task {failed.name} {exit_reason(code)}"
            self.note(f"task {failed.name} {describe_status(code)}")
            return code if code > 0 else 128 - code
        return 0
