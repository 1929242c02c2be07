"""Helpers for tests that run real processes (shared by the test packages)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from distrib.cluster.ports import free_ports
from tests import forked

#: A started program: a ``subprocess.Popen`` or its warm-interpreter counterpart.
Process = forked.Forked | subprocess.Popen[str]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT = 240


def free_port() -> int:
    """A TCP port free on 127.0.0.1, outside the OS's ephemeral range (see ``ports``)."""
    return ports(1)[0]


def ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1, outside the OS's ephemeral range.

    Under pytest-xdist each worker draws from its own slice, so two test files
    running at once never pick the same port, and no process's own sockets (gloo's
    listeners, store clients) can take it before the test's cluster binds it.
    """
    shares = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]) if shares > 1 else 0
    return free_ports(n, share=share, shares=shares)


def clean_env(**extra: str) -> dict[str, str]:
    """The test environment without cluster variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISTRIB_", "TF_CONFIG", "SLURM_", "TORCHELASTIC"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                         "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")}
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_python(args: list[str], env: dict[str, str] | None = None,
               timeout: float = DEFAULT_TIMEOUT, cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    """Run ``python args...`` to completion (killed after ``timeout`` seconds), forked from
    a warm interpreter where ``tests/forked.py`` can.

    A run that failed only with torch's known abort at interpreter exit (see
    docs/fault_tolerance.md, "A known abort at exit") runs once more, as pytest's rerun
    policy does for a test: a module-scoped fixture's error is not rerun by pytest.
    """
    proc = forked.run(args, env or clean_env(), cwd=cwd, timeout=timeout)
    if proc.returncode != 0 and EXIT_ABORT in proc.stderr:
        proc = forked.run(args, env or clean_env(), cwd=cwd, timeout=timeout)
    return proc


#: torch's abort while Python shuts down (the only failure the suite runs again).
EXIT_ABORT = "terminate called without an active exception"


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def start_cluster(args: list[str], cluster: dict[str, list[str]],
                  extra_env: dict[str, str] | None = None,
                  prefix: list[str] | None = None) -> list[tuple[str, Process]]:
    """Start one process per task of ``cluster`` (each with its own TF_CONFIG), forked from
    a warm interpreter where ``tests/forked.py`` can."""
    procs = []
    for job, addrs in cluster.items():
        for i in range(len(addrs)):
            env = clean_env(TF_CONFIG=tf_config(cluster, job, i), OMP_NUM_THREADS="1",
                            **(extra_env or {}))
            procs.append((f"{job}:{i}", forked.popen(args, env, prefix=prefix)))
    return procs


def wait_all(procs: list[tuple[str, Process]], timeout: float = DEFAULT_TIMEOUT
             ) -> dict[str, tuple[int, str, str]]:
    """Wait for every process; kill all of them if any outlives ``timeout``."""
    out: dict[str, tuple[int, str, str]] = {}
    try:
        for name, p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out[name] = (p.returncode, stdout, stderr)
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return out


def localhost_cluster(**jobs: int) -> dict[str, list[str]]:
    """A TF_CONFIG cluster on 127.0.0.1 with OS-chosen ports, e.g. ``worker=2``."""
    free = iter(ports(sum(jobs.values())))
    return {job: [f"127.0.0.1:{next(free)}" for _ in range(n)] for job, n in jobs.items()}


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())
