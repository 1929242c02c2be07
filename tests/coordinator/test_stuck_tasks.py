"""Tasks that stop answering, hold another secret, or exit from a function (real processes).

A stopped process (``SIGSTOP``) keeps its connections open and answers nothing: the
others must notice it through deadlines, not through closed sockets.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests import forked
from tests.coordinator.helpers import PROGRAMS, SECRET
from tests.support import Process, clean_env, localhost_cluster, tf_config

pytestmark = pytest.mark.slow
TIMEOUT = 240       # how long a test waits for a process (never reached when all is well)
COMMUNICATION = 5   # the cluster's communication timeout, seconds


class Tasks:
    """The tasks of a local cluster running programs/stuck.py; each one's stderr in a file."""

    def __init__(self, tmp_path: Path, jobs: dict[str, int], mode: str, epochs: int) -> None:
        self.cluster = localhost_cluster(**jobs)
        self.report = tmp_path / "report.json"
        self.args = [str(PROGRAMS / "stuck.py"), str(self.report), mode, str(epochs),
                     str(COMMUNICATION)]
        self.tmp = tmp_path
        self.procs: dict[str, Process] = {}

    def start(self, name: str, secret: str = SECRET["DISTRIB_CLUSTER_SECRET"]) -> None:
        job, index = name.split(":")
        env = clean_env(TF_CONFIG=tf_config(self.cluster, job, int(index)),
                        OMP_NUM_THREADS="1", DISTRIB_CLUSTER_SECRET=secret)
        with open(self.tmp / f"{name.replace(':', '_')}.err", "w") as err:
            self.procs[name] = forked.popen(self.args, env, stderr=err)

    def listening(self, name: str) -> None:
        """Wait until task ``name`` accepts connections."""
        job, index = name.split(":")
        host, port = self.cluster[job][int(index)].rsplit(":", 1)
        for _ in range(TIMEOUT * 10):
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{name} never listened")

    def chief_line(self, prefix: str) -> None:
        stdout = self.procs["chief:0"].stdout
        assert stdout is not None
        while line := stdout.readline():
            if line.startswith(prefix):
                return
        raise AssertionError(f"the chief never printed {prefix!r}: {self.stderr('chief:0')}")

    def wait(self, name: str) -> int:
        return self.procs[name].wait(timeout=TIMEOUT)

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name.replace(':', '_')}.err").read_text()

    def result(self) -> Any:
        return json.loads(self.report.read_text())

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _tasks(tmp_path: Path, jobs: dict[str, int], mode: str, epochs: int) -> Tasks:
    return Tasks(tmp_path, jobs, mode, epochs)


def test_a_stopped_worker_loses_its_functions_to_the_other_and_training_finishes(
        tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, "train", 8)
    try:
        for name in ("ps:0", "worker:0", "worker:1", "chief:0"):
            tasks.start(name)
        tasks.chief_line("epoch 0")
        os.kill(tasks.procs["worker:1"].pid, signal.SIGSTOP)   # alive, answering nothing
        assert tasks.wait("chief:0") == 0, tasks.stderr("chief:0")
        report = tasks.result()
        assert report["steps"] == 8 * 16                         # every function ran
        assert report["workers"][-1] == [0]                      # on the worker that answers
        for name in ("worker:0", "ps:0"):                        # the chief's beats reached them
            assert tasks.wait(name) == 0, tasks.stderr(name)
            assert "Lost task" not in tasks.stderr(name)
    finally:
        tasks.stop()


def test_a_stopped_ps_is_named_by_every_task(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, "train", 1000)
    try:
        for name in ("ps:0", "worker:0", "worker:1", "chief:0"):
            tasks.start(name)
        tasks.chief_line("epoch 0")
        os.kill(tasks.procs["ps:0"].pid, signal.SIGSTOP)
        assert tasks.wait("chief:0") != 0
        report = tasks.result()
        assert report["lost"] == ["ps:0"] and "Lost task ps:0" in report["error"]
        for name in ("worker:0", "worker:1"):
            assert tasks.wait(name) != 0
            assert "Lost task ps:0" in tasks.stderr(name), tasks.stderr(name)
            assert "Lost task chief:0" not in tasks.stderr(name)
    finally:
        tasks.stop()


def test_a_worker_with_another_secret_fails_the_chief_and_both_say_why(
        tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, "train", 20)
    try:
        for name in ("ps:0", "worker:0"):
            tasks.start(name)
        tasks.start("worker:1", secret="another-secret-of-32-bytes-012345")
        tasks.listening("worker:1")
        tasks.start("chief:0")
        assert tasks.wait("chief:0") != 0
        report = tasks.result()
        assert report["type"] == "ConfigError"
        assert "worker:1 refused chief:0's connection: the two hold different cluster " \
               "secrets" in report["error"]
        assert "DISTRIB_CLUSTER_SECRET" in report["error"]
        chief = tasks.stderr("chief:0")
        assert "Exception in thread" not in chief and "worker:1 refused" in chief
        worker = tasks.stderr("worker:1")
        assert "worker:1 refused a connection from chief:0: its handshake was not made with " \
               "worker:1's cluster secret" in worker, worker
        assert "Traceback" not in worker
        for name in ("worker:0", "ps:0"):
            assert tasks.wait(name) == 0, tasks.stderr(name)
    finally:
        tasks.stop()


def test_sys_exit_in_a_scheduled_function_is_its_error_and_the_worker_serves_on(
        tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, {"chief": 1, "worker": 1, "ps": 1}, "exit", 1)
    try:
        for name in ("ps:0", "worker:0", "chief:0"):
            tasks.start(name)
        assert tasks.wait("chief:0") == 0, tasks.stderr("chief:0")
        report = tasks.result()
        assert report["exit_type"] == "RemoteError"
        assert "sys.exit(3) on worker:0" in report["exit_error"]
        assert report["after"] is True and report["steps"] == 16
        for name in ("worker:0", "ps:0"):
            assert tasks.wait(name) == 0, tasks.stderr(name)
    finally:
        tasks.stop()
