"""``distrib run --cluster "chief=1,worker=2"``: every task of a TF_CONFIG cluster on this machine.

Each task is one process running the same program, with its own ``TF_CONFIG``
(addresses on 127.0.0.1, free ports outside the OS's ephemeral range, see
:mod:`distrib.cluster.ports`).  Their output is streamed
line by line with a ``[worker:1] `` prefix.  The launcher

* gives every task the same fresh secret (``DISTRIB_CLUSTER_SECRET``, kept if set)
  with which the tasks of a parameter-server cluster authenticate each other;
* follows the cluster manager's rules of :mod:`distrib.launch.policy` when a task
  ends: in a synchronous cluster a failed chief or worker stops every task (or, with
  ``--max-restarts``, restarts them all); under a ``ps`` job a lost worker is
  restarted alone or left out while training goes on, and a lost chief or ``ps``
  restarts or stops the whole cluster; an evaluator never stops training;
* exits with the failed task's status, naming it (``task worker:1 exited with
  status 3``), or, under a ``ps`` job, with the chief's; a summary at the end
  gives each task's fate;
* passes Ctrl-C / SIGTERM on to every task;
* leaves no process behind: each task runs in its own process group, which is
  sent SIGTERM, then SIGKILL after a grace period, and dies with the launcher
  (``PR_SET_PDEATHSIG``) if the launcher is killed (:mod:`distrib.cluster.supervisor`).

Example:
    >>> parse_cluster_arg("chief=1,worker=2")
    {'chief': 1, 'worker': 2}
"""

from __future__ import annotations

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
from distrib.cluster.restarts import RESTART_COUNT_VARIABLE, Attempt, run_with_restarts
from distrib.cluster.roles import TASK_TYPES, suggest, validate_cluster_wide
from distrib.cluster.supervisor import (
    exit_reason,
    exit_status,
    forwarding_signals,
    signal_process,
    start_process,
    stop_processes,
)
from distrib.errors import ConfigError, explain
from distrib.launch.policy import ClusterRules

__all__ = ["parse_cluster_arg", "local_cluster", "LocalClusterLauncher", "describe_status"]

_EXAMPLE = "e.g. --cluster chief=1,worker=2"
#: The most tasks of one job ``--cluster`` starts on one machine (each is a process).
MAX_TASKS_PER_JOB = 1024


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
    if int(count) > MAX_TASKS_PER_JOB:
        raise ConfigError(explain(f"--cluster {job}", count, f"at most {MAX_TASKS_PER_JOB} "
                                  "tasks of one job can be started on this machine",
                                  "start fewer tasks, or start a large cluster's tasks on "
                                  "several machines with TF_CONFIG"))
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



@dataclass
class _Task:
    name: str
    job: str
    index: int
    proc: subprocess.Popen[bytes]
    pumps: list[threading.Thread] = field(default_factory=list)
    ended: bool = False


class LocalClusterLauncher:
    """Start, stream, supervise, restart and stop the tasks of a local TF_CONFIG cluster.

    Args:
        jobs: ``{job: number of tasks}``, e.g. ``{"chief": 1, "worker": 2}``.
        command: the program every task runs (``[python, script, args...]``).
        grace_period: seconds between SIGTERM and SIGKILL when stopping tasks (and,
            under a ``ps`` job, that the other tasks get to end by themselves once
            the chief has ended).
        extra_env: more environment variables for every task.
        max_restarts: restarts allowed to each task alone and to the whole cluster
            (see :mod:`distrib.launch.policy`).

    Example::

        launcher = LocalClusterLauncher({"chief": 1, "worker": 2, "ps": 1},
                                        [sys.executable, "train.py"], max_restarts=2)
        status = launcher.run()      # the chief's status
    """

    def __init__(self, jobs: dict[str, int], command: list[str],
                 grace_period: float = 10.0, extra_env: dict[str, str] | None = None,
                 max_restarts: int = 0) -> None:
        self.jobs = dict(jobs)
        self.cluster = local_cluster(jobs)
        self.command = command
        self.grace_period = grace_period
        self.extra_env = dict(extra_env or {})
        self.rules = ClusterRules(jobs, max_restarts)
        self.failure: str | None = None  # after run(): which task failed, and how
        self.interrupted = False  # after run(): stopped by Ctrl-C / SIGTERM
        # Every task of the cluster proves it belongs to it with this secret (the
        # parameter-server runtime authenticates its calls with it).
        self.secret = cluster_secret() or secrets.token_hex(32)
        self.tasks: list[_Task] = []          # every process started in this attempt
        self.fates: dict[str, list[str]] = {}  # task -> what happened to it, in order
        self.restarts: dict[str, int] = {}     # task -> restarts alone so far
        self._attempt_number = 0
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

    def _pump(self, stream: IO[bytes], prefix: bytes, sink: IO[str]) -> None:
        for line in iter(stream.readline, b""):
            self._write(sink, prefix + (line if line.endswith(b"\n") else line + b"\n"))
        stream.close()

    def _fate(self, task: str, event: str) -> None:
        self.fates.setdefault(task, []).append(event)

    # ------------------------------------------------------------- processes
    def _env(self, job: str, index: int, starts: int) -> dict[str, str]:
        tf_config = json.dumps({"cluster": self.cluster, "task": {"type": job, "index": index}})
        extra = {"TF_CONFIG": tf_config, CLUSTER_SECRET: self.secret, **self.extra_env,
                 RESTART_COUNT_VARIABLE: str(starts)}
        if get("PYTHONUNBUFFERED") is None:
            extra["PYTHONUNBUFFERED"] = "1"
        if get("OMP_NUM_THREADS") is None:
            # The tasks share this machine's cores: give each its share, not all of them.
            tasks = sum(len(a) for j, a in self.cluster.items() if j != "ps") or 1
            extra["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // tasks))
        return child_environment(extra, remove=(*TORCHRUN_VARIABLES, *LOCAL_REPLICA_VARIABLES))

    def _start_task(self, job: str, index: int) -> _Task:
        name = f"{job}:{index}"
        # DISTRIB_RESTART_COUNT: how often this task was started before (restarts of the
        # whole cluster and of this task alone)
        starts = self._attempt_number + self.restarts.get(name, 0)
        proc = start_process(self.command, self._env(job, index, starts),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        task = _Task(name, job, index, proc)
        self.tasks.append(task)
        return task

    def _stream(self, task: _Task) -> None:
        prefix = f"[{task.name}] ".encode()
        for stream, sink in ((task.proc.stdout, self._out), (task.proc.stderr, self._err)):
            assert stream is not None
            thread = threading.Thread(target=self._pump, args=(stream, prefix, sink),
                                      daemon=True)
            thread.start()
            task.pumps.append(thread)

    def start(self) -> None:
        """Start every task (all processes first, then the output threads)."""
        for job, addresses in self.cluster.items():
            for index in range(len(addresses)):
                if self._signal is not None:
                    break
                self._start_task(job, index)
        for task in self.tasks:
            self._stream(task)

    def _signal_groups(self, sig: int) -> None:
        for task in self.tasks:
            signal_process(task.proc, sig)

    def stop(self, sig: int = signal.SIGTERM, patience: float = 0.0) -> None:
        """Stop every task: ``patience`` s to end by itself, then ``sig``, SIGKILL after the grace period.

        Signals go to each task's process group, so processes a task started stop too.
        """
        deadline = time.monotonic() + patience
        for task in self.tasks:
            if task.ended:
                continue
            try:
                code = task.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
            task.ended = True
            self._fate(task.name, exit_reason(code))
        stop_processes([t.proc for t in self.tasks], sig, self.grace_period)
        for task in self.tasks:
            for thread in task.pumps:
                thread.join(timeout=5)
            if not task.ended:
                task.ended = True
                self._fate(task.name, "stopped by the launcher "
                           f"({exit_reason(task.proc.returncode)})")

    # ------------------------------------------------------------ supervision
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is None:
            self._signal = signum
            self._signal_groups(signum)
        else:  # a second Ctrl-C: no more waiting
            self._signal_groups(signal.SIGKILL)

    def _ended(self, task: _Task, code: int, chief_done: bool) -> Attempt | None:
        """Apply the rules to ``task``, which ended with ``code``; an Attempt ends the run."""
        task.ended = True
        reason = exit_reason(code)
        if code == 0:
            self._fate(task.name, reason)
            return None
        action = self.rules.on_failure(task.name, self.restarts.get(task.name, 0), chief_done)
        if action == "restart task":
            count = self.restarts[task.name] = self.restarts.get(task.name, 0) + 1
            self._fate(task.name, f"{reason}; restarted alone ({count} of "
                       f"{self.rules.max_restarts})")
            new = self._start_task(task.job, task.index)
            self._stream(new)
            self.note(f"task {task.name} {reason}; restarting it alone (restart {count} of "
                      f"{self.rules.max_restarts} for this task, pid {new.proc.pid}); the "
                      "other tasks go on")
            return None
        if action == "go on":
            self._fate(task.name, reason + ("" if chief_done else "; not restarted"))
            if not chief_done:
                why = "no restart left" if self.rules.max_restarts else "no --max-restarts"
                self.note(f"task {task.name} {reason}; {why}: training goes on without it")
            return None
        self._fate(task.name, reason)
        self.note(f"task {task.name} {describe_status(code)}; stopping the other tasks")
        return Attempt(exit_status(code), f"task {task.name} {reason}")

    def _supervise(self) -> Attempt:
        """Watch the tasks until the job is over, fails, or a signal arrives."""
        chief_done = False
        codes: dict[str, int] = {}
        while self._signal is None:
            ended = [(t, c) for t in list(self.tasks) if not t.ended
                     and (c := t.proc.poll()) is not None]
            # failures first: a task that failed before the chief ended counts as lost
            # during training even when both are seen in one round
            for task, code in sorted(ended, key=lambda tc: tc[1] == 0):
                codes[task.name] = code
                outcome = self._ended(task, code, chief_done)
                if outcome is not None:
                    return outcome
                if code == 0 and task.name == self.rules.chief and self.rules.with_ps:
                    chief_done = True
            if not any(self.rules.must_finish(t.name) for t in self.tasks if not t.ended):
                return Attempt(self.rules.success(codes))
            time.sleep(0.05)
        return Attempt(128 + self._signal, interrupted=True)

    def _attempt(self, number: int) -> Attempt:
        """One run of the whole cluster (``number`` > 0: a restart, on fresh ports)."""
        self._attempt_number = number
        if number:
            self.cluster = local_cluster(self.jobs)
            for job, addresses in self.cluster.items():
                for i in range(len(addresses)):
                    self._fate(f"{job}:{i}", f"restarted with the cluster (restart {number})")
        self.tasks = []
        self.note("starting " + ", ".join(f"{job}:{i} at {addr}" for job, addrs in
                                           self.cluster.items()
                                           for i, addr in enumerate(addrs)))
        result = Attempt(1, "the launcher failed")
        try:
            self.start()
            result = self._supervise()
        finally:
            # once the chief of a ps cluster has ended, the others got its Shutdown
            over = self.rules.with_ps and result.code == 0 and result.reason is None
            self.stop(self._signal or signal.SIGTERM,
                      patience=self.grace_period if over else 0.0)
        if result.interrupted:
            self.interrupted = True
        elif result.reason is not None:
            self.failure = result.reason
        return result

    def run(self) -> int:
        """Start the cluster and supervise it; returns the launcher's exit status."""
        with forwarding_signals(self._on_signal):
            code = run_with_restarts(self._attempt, self.rules.max_restarts, self.note)
        if self._signal is not None:
            self.note(f"stopped every task on {signal.Signals(self._signal).name}")
        elif self.failure is not None and code != 0:
            self.note(self.failure)
        self._summary(code)
        return code

    def _summary(self, code: int) -> None:
        lines = [f"  {job}:{i}: " + "; ".join(self.fates.get(f"{job}:{i}", ["not started"]))
                 for job, addresses in self.cluster.items() for i in range(len(addresses))]
        self.note(f"summary (exit status {code}):\n" + "\n".join(
            f"distrib run: {line}" for line in lines))
