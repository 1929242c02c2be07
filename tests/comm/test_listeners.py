"""Every socket distrib listens on is bound to the task's own address, never a wildcard.

A live 2-replica group lists its listening TCP sockets (/proc/self/fd joined with
/proc/net/tcp and tcp6): the rendezvous store of replica 0 and gloo's own listener.
The cluster names 127.0.0.1, so every listener must be on 127.0.0.1 — not on 0.0.0.0
or ``::``, where the machine's other addresses would reach it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import clean_env, localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "listeners.py")

pytestmark = pytest.mark.slow


def listeners(out: Path) -> list[list[tuple[str, int]]]:
    return [[tuple(a) for a in json.loads((out / f"listeners-{r}.json").read_text())]
            for r in range(2)]


def test_two_tf_config_workers_listen_only_on_their_own_address(tmp_path: Path) -> None:
    procs = start_cluster([PROGRAM, "multi_worker", str(tmp_path)], localhost_cluster(worker=2))
    for name, (rc, _, err) in wait_all(procs).items():
        assert rc == 0, f"{name}: {err[-3000:]}"
    found = listeners(tmp_path)
    assert len(found[0]) >= 2 and len(found[1]) >= 1   # store + gloo on the chief, gloo on the other
    assert {addr for replica in found for addr, _ in replica} == {"127.0.0.1"}, found


def test_local_mirrored_replicas_listen_only_on_loopback(tmp_path: Path) -> None:
    proc = run_python([PROGRAM, "mirrored", str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = listeners(tmp_path)
    assert len(found[0]) >= 2 and len(found[1]) >= 1
    assert {addr for replica in found for addr, _ in replica} == {"127.0.0.1"}, found
