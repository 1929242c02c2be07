"""Every program in examples/ runs and does what it says."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, clean_env, run_python

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.slow


def test_demo_fit_reaches_95_percent_and_writes_tensorboard_logs(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "demo_fit.py")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy >= 0.95
    assert proc.stdout.count("Epoch 1/") == 1  # one progress bar: the chief's
    assert list((tmp_path / "logs" / "train").glob("events.out.tfevents.*"))
    assert list((tmp_path / "logs" / "validation").glob("events.out.tfevents.*"))


def test_custom_training_loop_learns(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "custom_training_loop.py"), "--epochs", "2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("epoch ")]
    assert len(lines) == 2  # printed by the chief only
    assert float(lines[-1].rsplit(" ", 1)[1]) > 0.6


def test_multi_worker_fit_under_distrib_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "distrib.launch", "run", "--cluster",
                           "worker=2", str(EXAMPLES / "multi_worker_fit.py"), "--epochs", "2"],
                          env=clean_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[worker:0] workers=2" in proc.stdout
    assert "[worker:1] workers=2" not in proc.stdout  # the chief reports


def test_callbacks_and_tensorboard(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "callbacks_tensorboard.py"), "--out", str(tmp_path),
                       "--epochs", "3"], env=clean_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("ckpt_*.pt")) == [
        "ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt"]
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert "Learning rate for epoch 3 is 0.0001" in proc.stdout
    assert list((tmp_path / "logs" / "train").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("strategy,replicas", [("one_device", 1), ("mirrored", 2),
                                               ("multi_worker", 2)])
def test_the_seeds_keras_program_runs_inside_the_scope(strategy: str, replicas: int,
                                                       tmp_path: Path) -> None:
    script = [str(EXAMPLES / "strategies_in_scope.py"), "--strategy", strategy]
    if strategy == "multi_worker":
        proc = subprocess.run([sys.executable, "-m", "distrib.launch", "run", "--cluster",
                               "worker=2", *script], env=clean_env(), cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    else:
        proc = run_python(script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if "strategy=" in ln]
    assert len(lines) == 1, proc.stdout  # the chief reports
    assert f"replicas={replicas}" in lines[0]
    assert float(re.search(r"accuracy=([0-9.]+)", lines[0]).group(1)) > 0.75  # type: ignore[union-attr]


def test_transfer_learning_keeps_every_replica_identical(tmp_path: Path) -> None:
    proc = run_python([str(EXAMPLES / "transfer_learning.py")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sums = re.findall(r"replica (\d) weights checksum ([-+.0-9e]+)", proc.stdout)
    assert sorted(r for r, _ in sums) == ["0", "1"] and sums[0][1] == sums[1][1], sums
    accuracy = float(re.search(r"fine-tuned: test accuracy ([0-9.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.8

def _distrib_run(cluster: str, script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "distrib.launch", "run", "--cluster", cluster,
                           str(EXAMPLES / script), *args], env=clean_env(OMP_NUM_THREADS="1"),
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_parameter_server_fit_reaches_the_demo_accuracy_band(tmp_path: Path) -> None:
    proc = _distrib_run("chief=1,worker=2,ps=1", "parameter_server_fit.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    # Asynchronous updates make the result vary from run to run, and more so on a busy machine
    # (a worker starved of CPU computes its gradient on older parameters): 0.944-0.969 alone,
    # 0.936-0.969 over 20 runs with two clusters sharing 2 cores, 0.930 once in CI; the same
    # program trained synchronously on one device reaches 0.961-0.972 over 6 shuffles.  The
    # bar sits well under that spread and far above chance (0.10); the oracle tests in
    # tests/coordinator pin the updates themselves.
    assert accuracy >= 0.90
    assert "[chief:0] Epoch 8/8" in proc.stdout  # the chief runs the loop and the callbacks
    assert "[worker:0] Epoch" not in proc.stdout


def test_parameter_server_custom_loop_learns(tmp_path: Path) -> None:
    proc = _distrib_run("chief=1,worker=2,ps=1", "parameter_server_custom_loop.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("[chief:0] epoch ") == 4
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    # Asynchronous updates: how stale each gradient is depends on the machine's load
    # (0.84 to 0.93 seen here); chance is 0.10, so this says it learned.
    assert accuracy > 0.75
