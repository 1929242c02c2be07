"""The fault-tolerance examples survive kill -9 and preemption of a worker, bitwise.

Each example first runs uninterrupted (the reference); then a worker is killed with
-9 at a random step under ``distrib run --max-restarts 2`` (or sent SIGTERM), and the
final weights must equal the reference's exactly.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.faults import run_with_kill, wait_dead
from tests.support import EXIT_ABORT, REPO, clean_env

EXAMPLES = REPO / "examples"
FIT = str(EXAMPLES / "fault_tolerant_fit.py")
LOOP = str(EXAMPLES / "fault_tolerant_custom_loop.py")
ARGS = {FIT: ["--backup-dir", "backup", "--save-freq", "5"],
        LOOP: ["--checkpoint-dir", "ckpt", "--steps", "50"]}
STEPS_PER_EPOCH = 23  # 1438 digits in global batches of 64
pytestmark = pytest.mark.slow


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _assert_same_result(ref: Path, run: Path) -> None:
    for a, b in zip(_weights(ref / "final.npz"), _weights(run / "final.npz"), strict=True):
        assert a.dtype == np.float64 and np.array_equal(a, b)
    history = ref / "final.npz.history.json"
    if history.exists():
        assert json.loads(history.read_text()) == \
            json.loads((run / "final.npz.history.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One uninterrupted run of each example."""
    out = {}
    for script in (FIT, LOOP):
        d = tmp_path_factory.mktemp(Path(script).stem)
        args = ["run", "--cluster", "worker=2", script, *ARGS[script], "--out", "final.npz"]
        run = run_with_kill(args, d)
        if run.returncode != 0 and EXIT_ABORT in run.stderr:  # torch's abort at exit: once more
            d = tmp_path_factory.mktemp(Path(script).stem)
            run = run_with_kill(args, d)
        assert run.returncode == 0, run.stderr[-3000:]
        out[script] = d
    return out


@pytest.mark.parametrize("script", [FIT, LOOP], ids=["fit", "custom_loop"])
def test_kill_9_of_a_worker_at_a_random_step_resumes_bitwise(
        tmp_path: Path, reference: dict[str, Path], script: str) -> None:
    step = random.Random().randint(2, 45)
    run = run_with_kill(["run", "--cluster", "worker=2", "--max-restarts", "2", script,
                         *ARGS[script], "--out", "final.npz", "--trace", "--step-seconds",
                         "0.05"], tmp_path, task="worker:1", step=step)
    assert run.killed is not None, run.stdout[-2000:]
    assert run.returncode == 0, f"killed at step {step}\n" + run.stderr[-4000:]
    assert "task worker:1 was killed by signal 9 (SIGKILL); restarting every task " \
        "(restart 1 of 2)" in run.stderr
    assert "succeeded after 1 restart(s)" in run.stderr
    _assert_same_result(reference[script], tmp_path)
    if script == FIT:
        assert not (tmp_path / "backup").exists()  # BackupAndRestore deletes it at the end
    assert len(run.pids) >= 4  # two workers, started twice
    assert wait_dead(run.pids) == []


def test_sigterm_on_the_non_chief_worker_saves_at_an_agreed_step_and_exits_42(
        tmp_path: Path, reference: dict[str, Path]) -> None:
    step = random.Random().randint(3, 40)
    args = ["run", "--cluster", "worker=2", LOOP, *ARGS[LOOP], "--out", "final.npz"]
    run = run_with_kill([*args, "--trace", "--step-seconds", "0.05"], tmp_path,
                        task="worker:1", step=step, sig=signal.SIGTERM)
    assert run.returncode == 42, run.stderr[-3000:]
    assert "exited with status 42 (it saved a checkpoint for a preemption)" in run.stderr
    last = {task: max(int(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines()
                      if line.startswith(f"[{task}] step "))
            for task in ("worker:0", "worker:1")}
    assert last["worker:0"] == last["worker:1"] >= step  # both stopped at the agreed step
    assert not (tmp_path / "final.npz").exists()
    again = run_with_kill(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_same_result(reference[LOOP], tmp_path)


def test_preemption_during_the_last_step_of_an_epoch_resumes_at_the_epoch_end(
        tmp_path: Path, reference: dict[str, Path]) -> None:
    program = str(Path(__file__).parent / "preempt_fit.py")
    cmd = [sys.executable, "-m", "distrib.launch", "run", "--cluster", "worker=2",
           "--max-restarts", "1", program, str(STEPS_PER_EPOCH), *ARGS[FIT], "--out",
           "final.npz", "--trace"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "exited with status 42 (it saved a checkpoint for a preemption); restarting" \
        in proc.stderr
    # The second run resumed at the end of epoch 0: no step of epoch 0 runs twice.
    steps = [int(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
             if line.startswith("[worker:0] step ")]
    assert steps.count(STEPS_PER_EPOCH) == 1 and steps.count(STEPS_PER_EPOCH + 1) == 1
    _assert_same_result(reference[FIT], tmp_path)
