"""`distrib run --cluster ... --max-restarts N`: every task restarts when one fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrib.cluster.restarts import Attempt, exit_reason, run_with_restarts
from tests.support import clean_env

LAUNCH = [sys.executable, "-m", "distrib.launch", "run"]

# Exits with argv[2] on worker:1 while DISTRIB_RESTART_COUNT < argv[1], else 0.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    config = json.loads(os.environ["TF_CONFIG"])
    attempt = int(os.environ["DISTRIB_RESTART_COUNT"])
    print("attempt", attempt, flush=True)
    if config["task"]["index"] == 1 and attempt < int(sys.argv[1]):
        sys.exit(int(sys.argv[2]))
""")


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "task.py"
    path.write_text(SCRIPT)
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LAUNCH, *args], env=clean_env(), capture_output=True, text=True,
                          timeout=120)


def test_the_loop_restarts_until_success_and_reports_each_reason() -> None:
    codes = iter([Attempt(3, "task worker:1 exited with status 3"),
                  Attempt(137, "task worker:0 was killed by signal 9 (SIGKILL)"), Attempt(0)])
    notes: list[str] = []
    assert run_with_restarts(lambda n: next(codes), 5, notes.append) == 0
    assert notes == [
        "task worker:1 exited with status 3; restarting every task (restart 1 of 5)",
        "task worker:0 was killed by signal 9 (SIGKILL); restarting every task (restart 2 of 5)",
        "succeeded after 2 restart(s): restart 1: task worker:1 exited with status 3; "
        "restart 2: task worker:0 was killed by signal 9 (SIGKILL)"]


def test_the_loop_stops_when_interrupted_or_out_of_restarts() -> None:
    notes: list[str] = []
    assert run_with_restarts(lambda n: Attempt(143, interrupted=True), 3, notes.append) == 143
    assert notes == []
    assert run_with_restarts(lambda n: Attempt(3, "x failed"), 1, notes.append) == 3
    assert notes[-1] == "ended with status 3 after 1 restart(s) (no restart left): " \
        "restart 1: x failed"
    assert exit_reason(42) == "exited with status 42 (it saved a checkpoint for a preemption)"


@pytest.mark.slow
def test_a_failed_task_restarts_every_task(script: Path) -> None:
    done = _run(["--cluster", "worker=2", "--max-restarts", "2", str(script), "1", "3"])
    assert done.returncode == 0, done.stderr
    assert "distrib run: task worker:1 exited with status 3; restarting every task " \
        "(restart 1 of 2)" in done.stderr
    assert "succeeded after 1 restart(s)" in done.stderr
    assert done.stdout.count("attempt 1") == 2  # both tasks ran again


@pytest.mark.slow
def test_the_status_of_the_last_failure_is_returned_when_restarts_run_out(
        script: Path) -> None:
    done = _run(["--cluster", "worker=2", "--max-restarts", "1", str(script), "5", "42"])
    assert done.returncode == 42
    assert "(it saved a checkpoint for a preemption); restarting every task" in done.stderr
    assert "ended with status 42 after 1 restart(s) (no restart left)" in done.stderr


def test_max_restarts_must_be_a_number(script: Path) -> None:
    from distrib.launch.cli import main

    assert main(["run", "--cluster", "worker=1", "--max-restarts", "x", str(script)]) == 2
