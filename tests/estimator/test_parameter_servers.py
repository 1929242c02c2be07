"""Estimators on a cluster with ``ps`` tasks: asynchronous training, TensorFlow 1 style.

Each test runs real processes: a cluster started by hand (one TF_CONFIG per task) or by
``distrib run --cluster``.
"""

from __future__ import annotations

import json
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.estimator.common import read_events
from tests.support import REPO, clean_env, localhost_cluster, start_cluster, wait_all

PROGRAM = str(REPO / "tests" / "estimator" / "programs" / "ps_program.py")
SECRET = {"DISTRIB_CLUSTER_SECRET": "test-secret-of-32-bytes-0123456"}
pytestmark = pytest.mark.slow  # 3 to 4 processes each


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    return dict(json.loads(path.read_text()))


def test_one_training_task_with_two_ps_tasks_equals_one_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = localhost_cluster(chief=1, ps=2)
    out = tmp_path / "out"
    procs = start_cluster([PROGRAM, str(tmp_path / "ps_run"), str(out)], cluster, SECRET)
    try:   # the oracle trains here meanwhile: the same program without TF_CONFIG
        monkeypatch.delenv("TF_CONFIG", raising=False)
        monkeypatch.setattr(sys, "argv", ["ps_program", str(tmp_path / "alone"), str(out)])
        runpy.run_path(PROGRAM, run_name="__main__")
    finally:
        results = wait_all(procs)
    for name, (code, _, stderr) in results.items():
        assert code == 0, f"{name}: {stderr[-3000:]}"
    ps_run, one = _load(Path(f"{out}.chief:0")), _load(Path(f"{out}.alone"))
    assert ps_run["global_step"] == one["global_step"] == ps_run["steps"] == 30
    assert sorted(ps_run["variables"]) == sorted(one["variables"])
    for name, value in one["variables"].items():
        np.testing.assert_allclose(ps_run["variables"][name], value, rtol=0, atol=1e-9)


def test_chief_worker_ps_and_evaluator_run_train_and_evaluate(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "distrib.launch", "run", "--cluster",
                           "chief=1,worker=1,ps=1,evaluator=1", PROGRAM,
                           str(tmp_path / "model"), str(out), "--max_steps", "40"],
                          env=clean_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    chief, worker = _load(Path(f"{out}.chief:0")), _load(Path(f"{out}.worker:0"))
    # One global step on ps:0 counts every task's steps; both tasks may take the last one.
    assert chief["steps"] + worker["steps"] == chief["global_step"] in (40, 41)
    assert chief["steps"] > 0 and worker["steps"] > 0
    assert chief["checkpoint"].endswith(f"model.ckpt-{chief['global_step']}")
    evaluated = [e.step for e in read_events(tmp_path / "model" / "eval").Scalars("loss")]
    assert evaluated and evaluated[-1] == chief["global_step"]


def test_a_dynamic_loss_scale_lives_on_the_ps_for_every_training_task(tmp_path: Path) -> None:
    out = tmp_path / "out"
    results = wait_all(start_cluster([PROGRAM, str(tmp_path / "model"), str(out)],
                                     localhost_cluster(chief=1, worker=1, ps=1),
                                     {**SECRET, "PS_MODEL_LOSS_SCALE": "1"}))
    for name, (code, _, stderr) in results.items():
        assert code == 0, f"{name}: {stderr[-3000:]}"
    chief, worker = _load(Path(f"{out}.chief:0")), _load(Path(f"{out}.worker:0"))
    assert chief["steps"] > 0 and worker["steps"] > 0
    # The counter on ps:0 counted every task's finite steps (all are), and the chief's
    # checkpoint saved it (each task's own wrapper would have counted its own steps only).
    assert chief["loss_scale"] == [1024.0, chief["steps"] + worker["steps"]], (chief, worker)


def _kill_while_training(tmp_path: Path, cluster: dict[str, list[str]], victim: str
                         ) -> dict[str, tuple[int | None, str]]:
    """Start ``cluster``, SIGKILL task ``victim`` once the chief stepped 3 times; the others' exits."""
    marker = tmp_path / "stepping"
    procs = dict(start_cluster([PROGRAM, str(tmp_path / "model"), str(tmp_path / "out"),
                                "--max_steps", "100000", "--marker", str(marker),
                                "--timeout", "3"], cluster, SECRET))
    out: dict[str, tuple[int | None, str]] = {}
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and \
                procs["chief:0"].poll() is None:
            time.sleep(0.05)
        assert marker.exists(), procs["chief:0"].communicate(timeout=30)[1][-3000:]
        procs[victim].send_signal(signal.SIGKILL)
        for name, proc in procs.items():
            if name != victim:
                out[name] = (proc.wait(timeout=60), proc.communicate(timeout=10)[1])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return out


def test_losing_a_ps_task_fails_the_chief_naming_it(tmp_path: Path) -> None:
    code, stderr = _kill_while_training(tmp_path, localhost_cluster(chief=1, ps=1),
                                        "ps:0")["chief:0"]
    assert code != 0 and "PeerLostError: Lost task ps:0" in stderr, stderr[-3000:]


def test_losing_the_chief_fails_the_worker_and_the_ps_naming_it(tmp_path: Path) -> None:
    exits = _kill_while_training(tmp_path, localhost_cluster(chief=1, worker=1, ps=1),
                                 "chief:0")
    for task in ("worker:0", "ps:0"):
        code, stderr = exits[task]
        assert code != 0 and "PeerLostError: Lost task chief:0" in stderr, stderr[-3000:]
