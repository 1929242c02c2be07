"""The Estimator examples run: seed 001 on two workers (with and without an evaluator task)
under `distrib run --cluster`, and seed 000 on two local replicas."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.estimator.common import read_events
from tests.support import REPO, clean_env, run_python

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.slow


def _distrib_run(cluster: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "distrib.launch", "run", "--cluster", cluster,
                           str(EXAMPLES / "estimator_multi_worker.py"), *args],
                          env=clean_env(), cwd=cwd, capture_output=True, text=True, timeout=400)


def test_seed_001_trains_on_two_workers_and_evaluates(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    proc = _distrib_run("worker=2", ["--model_dir", str(model_dir), "--learning_rate", "0.05"],
                        tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if "global_step=" in ln]
    assert len(lines) == 1 and lines[0].startswith("[worker:0] task worker:0 workers=2")
    accuracy = float(re.search(r"accuracy=([0-9.]+)", lines[0]).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.4
    assert "[worker:1] INFO:distrib.estimator:" not in proc.stdout + proc.stderr
    assert (model_dir / "checkpoint").is_file()
    assert [e.step for e in read_events(model_dir / "eval").Scalars("accuracy")] == [12]


def test_seed_001_with_an_evaluator_task(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    proc = _distrib_run("chief=1,worker=1,evaluator=1",
                        ["--model_dir", str(model_dir), "--learning_rate", "0.05",
                         "--start_delay_secs", "1", "--throttle_secs", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout + proc.stderr
    assert "[evaluator:0] INFO:distrib.estimator:Exiting evaluation, training finished at " \
           "global_step=12" in out
    assert "[chief:0] INFO:distrib.estimator:Saving dict" not in out   # the evaluator evaluates
    steps = [e.step for e in read_events(model_dir / "eval").Scalars("loss")]
    assert steps[-1] == 12


def test_seed_000_trains_on_two_local_replicas(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "estimator_mirrored.py"), "--replicas", "2",
                       "--model_dir", str(tmp_path / "model")], env=clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("replicas=2 global_step=16") == 1
    assert "Loss for final step:" in proc.stderr
