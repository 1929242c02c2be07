"""MirroredStrategy in a plain `python train.py` starts its own replica processes and cleans up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrib.cluster.local_launch import local_replica_env
from tests.support import clean_env

PROGRAM = str(Path(__file__).parent / "programs" / "mirrored_loop.py")
HANG_GUARD = 120


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int]) -> bool:
    for _ in range(100):
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_local_replica_env_parsing() -> None:
    assert local_replica_env({}) is None
    env = local_replica_env({"DISTRIB_LOCAL_RANK": "1", "DISTRIB_LOCAL_WORLD_SIZE": "2",
                             "DISTRIB_MASTER_ADDR": "127.0.0.1", "DISTRIB_MASTER_PORT": "5"})
    assert env is not None and (env.local_rank, env.master_port) == (1, 5)
    with pytest.raises(ValueError, match="DISTRIB_LOCAL_RANK = 2"):
        local_replica_env({"DISTRIB_LOCAL_RANK": "2", "DISTRIB_LOCAL_WORLD_SIZE": "2"})


@pytest.mark.slow
def test_failing_replica_stops_the_program_and_is_named(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, PROGRAM, str(tmp_path), "fail"], env=clean_env(),
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert proc.returncode != 0
    assert "replica 1 failed on purpose" in proc.stderr
    # the survivor names the failed replica and its exception
    assert "replica 1 (rank 1/2) ended its program with an uncaught ValueError" in \
        proc.stderr, proc.stderr[-3000:]
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2 and _wait_gone(pids)


def _sigint_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_signal_to_the_program_leaves_no_replica(tmp_path: Path, sig: signal.Signals) -> None:
    # As from a terminal: Ctrl-C reaches the program even when this test runs where SIGINT
    # is ignored (a background job of a non-interactive shell), which children inherit.
    proc = subprocess.Popen([sys.executable, PROGRAM, str(tmp_path)], env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_as_from_a_terminal)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("step 3"):
                break
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2
        proc.send_signal(sig)
        proc.communicate(timeout=HANG_GUARD)
        assert _wait_gone(pids), "a replica process outlived the program"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
