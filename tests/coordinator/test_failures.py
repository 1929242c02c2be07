"""Lost tasks: a worker killed and restarted, a ps killed, the chief killed (real processes)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests import forked
from tests.coordinator.helpers import PROGRAMS, SECRET
from tests.support import Process, clean_env, localhost_cluster, tf_config

pytestmark = pytest.mark.slow
TIMEOUT = 240


class Cluster:
    """The tasks of a local cluster, each startable again; the chief's stdout read by line."""

    def __init__(self, tmp_path: Path, max_epochs: int, timeout: float = 10) -> None:
        self.cluster = localhost_cluster(chief=1, worker=2, ps=1)
        self.report = tmp_path / "report.json"
        self.ckpt = tmp_path / "ckpt"
        self.ckpt.mkdir(exist_ok=True)
        self.args = [str(PROGRAMS / "faults.py"), str(self.report), str(self.ckpt),
                     str(max_epochs), str(timeout)]
        self.tmp = tmp_path
        self.procs: dict[str, Process] = {}

    def start(self, name: str) -> None:
        job, index = name.split(":")
        env = clean_env(TF_CONFIG=tf_config(self.cluster, job, int(index)),
                        OMP_NUM_THREADS="1", **SECRET)
        err = open(self.tmp / f"{name.replace(':', '_')}.{len(self.procs)}.err", "w")
        self.procs[name] = forked.popen(self.args, env, stderr=err)
        err.close()

    def start_all(self) -> None:
        for name in ("ps:0", "worker:0", "worker:1", "chief:0"):
            self.start(name)

    def wait_chief_line(self, prefix: str) -> str:
        stdout = self.procs["chief:0"].stdout
        assert stdout is not None
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            line = stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line
        raise AssertionError(f"the chief never printed {prefix!r}")

    def wait(self, name: str, timeout: float = TIMEOUT) -> int:
        return self.procs[name].wait(timeout=timeout)

    def stderr(self, name: str) -> str:
        files = sorted(self.tmp.glob(f"{name.replace(':', '_')}.*.err"))
        return files[-1].read_text() if files else ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, max_epochs=60)
    yield c
    c.stop()


def test_a_killed_worker_loses_no_work_and_rejoins_when_restarted(cluster: Cluster) -> None:
    cluster.start_all()
    cluster.wait_chief_line("epoch 1 ")
    os.kill(cluster.procs["worker:1"].pid, signal.SIGKILL)  # mid-epoch: closures in flight
    cluster.wait("worker:1")
    cluster.start("worker:1")                               # the same task, a new process
    assert cluster.wait("chief:0") == 0, cluster.stderr("chief:0")
    report = json.loads(cluster.report.read_text())
    assert report["workers"] == [0, 1]
    assert report["processes"] == 3      # worker:1's second process received work too
    assert report["steps"] == report["epochs"] * 16  # every scheduled step ran
    for name in ("worker:0", "worker:1", "ps:0"):
        assert cluster.wait(name) == 0, cluster.stderr(name)


def test_a_lost_ps_is_named_within_the_timeout_and_training_resumes_after_restart(
        cluster: Cluster) -> None:
    cluster.start_all()
    cluster.wait_chief_line("epoch 1 ")
    os.kill(cluster.procs["ps:0"].pid, signal.SIGKILL)
    killed = time.monotonic()
    assert cluster.wait("chief:0") != 0
    assert time.monotonic() - killed < 10 + 15  # the communication timeout, and margin
    report = json.loads(cluster.report.read_text())
    assert report["lost"] == ["ps:0"] and "ps:0" in report["error"]
    for name in ("worker:0", "worker:1"):
        cluster.wait(name)
    # Restart every task: the chief restores its latest checkpoint and carries on.
    cluster.report.unlink()
    cluster.args[-1] = str(report["resumed_from"] + report["epochs"] + 2)
    cluster.start_all()
    assert cluster.wait("chief:0") == 0, cluster.stderr("chief:0")
    resumed = json.loads(cluster.report.read_text())
    assert resumed["resumed_from"] >= 1 and resumed["epochs"] >= 1


def test_a_lost_chief_stops_the_workers_and_ps_with_an_error_naming_it(
        cluster: Cluster) -> None:
    cluster.start_all()
    cluster.wait_chief_line("epoch 0 ")
    os.kill(cluster.procs["chief:0"].pid, signal.SIGKILL)
    killed = time.monotonic()
    for name in ("worker:0", "worker:1", "ps:0"):
        assert cluster.wait(name) != 0
        assert "Lost task chief:0" in cluster.stderr(name)
    assert time.monotonic() - killed < 10 + 15


def test_a_chief_killed_alone_and_restarted_resumes_from_its_checkpoint(
        tmp_path: Path) -> None:
    # TensorFlow's model: workers and ps keep serving; a new coordinator program
    # re-creates the variables on the ps and restores the latest checkpoint.  Here the
    # restarted chief must come back within the communication timeout (30 s), or the
    # workers and ps stop, naming it.
    cluster = Cluster(tmp_path, max_epochs=4, timeout=30)
    try:
        cluster.start_all()
        cluster.wait_chief_line("epoch 1 ")            # the checkpoint of epoch 1 is written
        os.kill(cluster.procs["chief:0"].pid, signal.SIGKILL)
        cluster.wait("chief:0")
        cluster.start("chief:0")                       # the chief alone, a new process
        assert cluster.wait("chief:0") == 0, cluster.stderr("chief:0")
        report = json.loads(cluster.report.read_text())
        assert report["resumed_from"] >= 2             # epochs 0 and 1 are not run again
        assert report["epochs"] == 4 - report["resumed_from"]
        assert report["steps"] == report["epochs"] * 16
        assert report["processes"] == 2                # the same worker processes served it
        for name in ("worker:0", "worker:1", "ps:0"):
            assert cluster.wait(name) == 0, cluster.stderr(name)
    finally:
        cluster.stop()
