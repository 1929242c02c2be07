"""`distrib run` keeps parameter-server training going when a worker or the evaluator is killed.

Real ParameterServerStrategy ``Model.fit`` and Estimator ``train_and_evaluate`` clusters
(programs/ps_fit.py, programs/estimator_ps.py), each task a process started by the
launcher; the chief SIGKILLs the victim mid-training.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.estimator.common import read_events
from tests.launch.test_ps_supervision import summary
from tests.support import clean_env

PROGRAMS = Path(__file__).parent / "programs"
pytestmark = pytest.mark.slow  # 3 to 4 processes with torch each


def _run(tmp_path: Path, cluster: str, program: str, *args: str, restarts: int = 0
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    out = tmp_path / "out"
    out.mkdir()
    options = ["--cluster", cluster, "--grace-period", "5"]
    if restarts:
        options += ["--max-restarts", str(restarts)]
    done = subprocess.run([sys.executable, "-m", "distrib.launch", "run", *options,
                           str(PROGRAMS / program), str(out), *args], env=clean_env(),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    report = out / "report.json"
    return done, (json.loads(report.read_text()) if report.exists() else {})


def _started(tmp_path: Path) -> list[str]:
    return sorted(p.name.removesuffix(".pid") for p in (tmp_path / "out").glob("*.pid"))


def test_fit_goes_on_with_the_other_worker_when_one_is_killed(tmp_path: Path) -> None:
    done, report = _run(tmp_path, "chief=1,worker=2,ps=1", "ps_fit.py", "go-on")
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(report["loss"]) == 5 and "killed" in report  # type: ignore[arg-type]
    assert "task worker:1 was killed by signal 9 (SIGKILL); no --max-restarts: training " \
        "goes on without it" in done.stderr
    fates = summary(done.stderr)
    assert fates["worker:1"] == "was killed by signal 9 (SIGKILL); not restarted"
    assert fates["chief:0"] == fates["worker:0"] == fates["ps:0"] == "exited with status 0"


def test_a_killed_worker_is_restarted_alone_and_rejoins_fit(tmp_path: Path) -> None:
    done, report = _run(tmp_path, "chief=1,worker=2,ps=1", "ps_fit.py", "rejoin", restarts=2)
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(report["loss"]) == 5  # type: ignore[arg-type]
    restarted = int((tmp_path / "out" / "worker:1.1.pid").read_text())
    assert report["rejoined"] == restarted != report["killed"]  # it ran scheduled functions
    assert "task worker:1 was killed by signal 9 (SIGKILL); restarting it alone (restart 1 " \
        f"of 2 for this task, pid {restarted}); the other tasks go on" in done.stderr
    fates = summary(done.stderr)
    assert fates["worker:1"] == "was killed by signal 9 (SIGKILL); restarted alone " \
        "(1 of 2); exited with status 0"
    assert fates["chief:0"] == fates["worker:0"] == fates["ps:0"] == "exited with status 0"
    assert _started(tmp_path) == ["chief:0.0", "ps:0.0", "worker:0.0", "worker:1.0",
                                  "worker:1.1"]


@pytest.mark.parametrize("restarts", [0, 1], ids=["no_restart", "restarted"])
def test_a_killed_evaluator_never_stops_train_and_evaluate(tmp_path: Path,
                                                           restarts: int) -> None:
    done, report = _run(tmp_path, "chief=1,worker=1,ps=1,evaluator=1", "estimator_ps.py",
                        "evaluator:0", restarts=restarts)
    assert done.returncode == 0, done.stderr[-4000:]
    assert report["global_step"] in (60, 61)  # both training tasks may take the last step
    fates = summary(done.stderr)
    assert fates["chief:0"] == fates["worker:0"] == fates["ps:0"] == "exited with status 0"
    if not restarts:
        assert fates["evaluator:0"] == "was killed by signal 9 (SIGKILL); not restarted"
        return
    assert fates["evaluator:0"] == "was killed by signal 9 (SIGKILL); restarted alone " \
        "(1 of 1); exited with status 0"
    evaluated = [e.step for e in read_events(tmp_path / "out" / "model" / "eval")
                 .Scalars("loss")]
    assert evaluated[-1] == report["global_step"]  # the restarted one evaluated the last


def test_a_killed_worker_of_the_estimators_ps_path_is_restarted_alone(tmp_path: Path) -> None:
    done, report = _run(tmp_path, "chief=1,worker=1,ps=1", "estimator_ps.py", "worker:0",
                        restarts=1)
    assert done.returncode == 0, done.stderr[-4000:]
    assert report["global_step"] in (60, 61)
    fates = summary(done.stderr)
    # the restarted worker ends by itself, or is stopped when it was still starting as
    # training ended
    assert fates["worker:0"].startswith("was killed by signal 9 (SIGKILL); restarted alone "
                                        "(1 of 1); ")
    assert fates["chief:0"] == fates["ps:0"] == "exited with status 0"
    assert _started(tmp_path) == ["chief:0.0", "ps:0.0", "worker:0.0", "worker:0.1"]


def test_a_killed_ps_restarts_the_cluster_and_fit_resumes_from_its_backup(
        tmp_path: Path) -> None:
    done, report = _run(tmp_path, "chief=1,worker=2,ps=1", "ps_fit.py", "kill-ps", restarts=1)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "task ps:0 was killed by signal 9 (SIGKILL); restarting every task (restart 1 " \
        "of 1)" in done.stderr
    # the backup of epoch 0 was the last one written before ps:0 died (epoch 1's backup,
    # written after the epoch's callbacks, found it gone): the restarted fit starts at
    # epoch 1, and its history holds every epoch
    assert done.stdout.count("[chief:0] Epoch 1/5") == 1
    assert done.stdout.count("[chief:0] Epoch 2/5") == 2
    assert report["epochs"] == [0, 1, 2, 3, 4]
    fates = summary(done.stderr)
    assert fates["ps:0"] == "was killed by signal 9 (SIGKILL); restarted with the cluster " \
        "(restart 1); exited with status 0"
    assert fates["chief:0"].endswith("restarted with the cluster (restart 1); exited with "
                                     "status 0")
