"""Programs end with exit status 0: no thread is left inside torch when Python finalizes.

A daemon thread that is inside a torch call while the interpreter finalizes is ended by
``pthread_exit`` through a ``noexcept`` frame, and the process aborts after finishing
("terminate called without an active exception", exit status 134).  distrib's threads
(the input producer, the heartbeat) are stopped at exit; 50 runs of a 2-worker program
that leaves a busy input producer behind prove it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "exit_loop.py")


@pytest.mark.slow
def test_fifty_two_worker_runs_all_exit_with_status_zero() -> None:
    proc = run_python([PROGRAM, "50"], env=clean_env(OMP_NUM_THREADS="1"), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"runs": 50, "failures": []}, proc.stderr[-3000:]
