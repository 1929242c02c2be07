"""`distrib run --cluster` as a cluster manager: lost workers, evaluators, chiefs and ps tasks.

Real launcher processes running a tiny torch-free program (the same rules with real
ParameterServerStrategy and Estimator training are in test_ps_training.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrib.launch.policy import ClusterRules
from tests.support import clean_env

LAUNCH = [sys.executable, "-m", "distrib.launch", "run"]

# argv: OUT VICTIM HOW FAILS STARTS [CHIEF_STATUS]
# Every task writes OUT/<task>.<start>.pid (start: DISTRIB_RESTART_COUNT).  VICTIM, in its
# starts below FAILS, waits until every task of the cluster has started and then ends by HOW ("kill9": SIGKILL
# to itself; a number: that exit status).  The chief waits for the VICTIM's first STARTS
# starts (and for the death of those that fail), writes OUT/chief.done and exits with
# CHIEF_STATUS (default 0).  Workers and evaluators exit 0 after chief.done; ps tasks
# serve until they are stopped.  No wait is unbounded: 120 s, then status 99.
SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, time
    config = json.loads(os.environ["TF_CONFIG"])
    job, index = config["task"]["type"], config["task"]["index"]
    task, start = f"{job}:{index}", int(os.environ["DISTRIB_RESTART_COUNT"])
    out, victim, how, fails, starts = sys.argv[1:6]
    fails, starts = int(fails), int(starts)
    path = lambda name: os.path.join(out, name)
    open(path(f"{task}.{start}.pid.tmp"), "w").write(str(os.getpid()))
    os.rename(path(f"{task}.{start}.pid.tmp"), path(f"{task}.{start}.pid"))

    def wait_for(check):
        deadline = time.monotonic() + 120
        while not check():
            if time.monotonic() > deadline:
                sys.exit(99)
            time.sleep(0.02)

    def dead(name):
        pid = open(path(name)).read()
        try:
            return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z"
        except OSError:
            return True

    members = sum(len(tasks) for tasks in config["cluster"].values())
    def started():  # the cluster's tasks that have started at least once
        return {f.split(".")[0] for f in os.listdir(out)
                if f.endswith(".pid") and f.split(":")[0] in config["cluster"]}
    if task == victim and start < fails:
        wait_for(lambda: len(started()) >= members)
        if how == "kill9":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(int(how))
    if task == "chief:0":
        if victim != task:
            for k in range(starts):
                wait_for(lambda: os.path.exists(path(f"{victim}.{k}.pid")))
                if k < fails:
                    wait_for(lambda: dead(f"{victim}.{k}.pid"))
        open(path("chief.done"), "w").close()
        sys.exit(int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    if job == "ps":
        time.sleep(600)
    wait_for(lambda: os.path.exists(path("chief.done")))
""")


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "task.py"
    path.write_text(SCRIPT)
    (tmp_path / "out").mkdir()
    return path


def _run(script: Path, cluster: str, *args: str, restarts: int | None = None
         ) -> subprocess.CompletedProcess[str]:
    options = ["--cluster", cluster, "--grace-period", "2"]
    if restarts is not None:
        options += ["--max-restarts", str(restarts)]
    return subprocess.run([*LAUNCH, *options, str(script), str(script.parent / "out"), *args],
                          env=clean_env(), capture_output=True, text=True, timeout=240)


def summary(stderr: str) -> dict[str, str]:
    """The launcher's summary: each task's fate."""
    lines = stderr.split("distrib run: summary", 1)[1].splitlines()[1:]
    return dict(line.removeprefix("distrib run:   ").split(": ", 1) for line in lines
                if line.startswith("distrib run:   "))


def _started(script: Path) -> list[str]:
    return sorted(p.name.removesuffix(".pid") for p in (script.parent / "out").glob("*.pid"))


# ------------------------------------------------------------------ the rules
def test_the_rules_of_a_ps_cluster() -> None:
    rules = ClusterRules({"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}, max_restarts=2)
    assert rules.on_failure("worker:0", 0, chief_done=False) == "restart task"
    assert rules.on_failure("worker:0", 2, chief_done=False) == "go on"
    assert rules.on_failure("evaluator:0", 1, chief_done=False) == "restart task"
    assert rules.on_failure("chief:0", 0, chief_done=False) == "restart cluster"
    assert rules.on_failure("ps:0", 0, chief_done=False) == "restart cluster"
    assert rules.on_failure("ps:0", 0, chief_done=True) == "go on"   # after training
    assert [t for t in ("chief:0", "worker:0", "ps:0", "evaluator:0") if rules.must_finish(t)] \
        == ["chief:0", "evaluator:0"]
    assert rules.success({"chief:0": 0, "worker:1": 137}) == 0   # the chief's status


def test_the_rules_of_a_synchronous_cluster() -> None:
    rules = ClusterRules({"worker": 2, "evaluator": 1}, max_restarts=0)
    assert rules.on_failure("worker:1", 0, chief_done=False) == "restart cluster"
    assert rules.on_failure("evaluator:0", 0, chief_done=False) == "go on"
    assert [t for t in ("worker:0", "worker:1", "evaluator:0") if rules.must_finish(t)] \
        == ["worker:0", "worker:1", "evaluator:0"]
    # without a chief job, worker:0 is the chief (TensorFlow's rule)
    assert ClusterRules({"worker": 2, "ps": 1}, 1).on_failure("worker:0", 0, False) \
        == "restart cluster"


# ------------------------------------------------------- a lost worker, for real
@pytest.mark.slow
def test_a_killed_worker_of_a_ps_cluster_leaves_training_to_the_others(script: Path) -> None:
    done = _run(script, "chief=1,worker=2,ps=1", "worker:1", "kill9", "1", "1")
    assert done.returncode == 0, done.stderr
    assert "distrib run: task worker:1 was killed by signal 9 (SIGKILL); no --max-restarts: " \
        "training goes on without it" in done.stderr
    fates = summary(done.stderr)
    assert fates["worker:1"] == "was killed by signal 9 (SIGKILL); not restarted"
    assert fates["chief:0"] == fates["worker:0"] == "exited with status 0"
    assert fates["ps:0"].startswith("stopped by the launcher")
    assert _started(script) == ["chief:0.0", "ps:0.0", "worker:0.0", "worker:1.0"]


@pytest.mark.slow
def test_a_killed_worker_of_a_ps_cluster_is_restarted_alone(script: Path) -> None:
    done = _run(script, "chief=1,worker=2,ps=1", "worker:1", "kill9", "1", "2", restarts=2)
    assert done.returncode == 0, done.stderr
    assert "distrib run: task worker:1 was killed by signal 9 (SIGKILL); restarting it alone " \
        "(restart 1 of 2 for this task, pid " in done.stderr
    assert "restarting every task" not in done.stderr
    fates = summary(done.stderr)
    assert fates["worker:1"] == "was killed by signal 9 (SIGKILL); restarted alone (1 of 2); " \
        "exited with status 0"
    assert fates["chief:0"] == fates["worker:0"] == "exited with status 0"
    # the others went on: none of them started twice
    assert _started(script) == ["chief:0.0", "ps:0.0", "worker:0.0", "worker:1.0", "worker:1.1"]


@pytest.mark.slow
def test_restarts_are_counted_per_task(script: Path) -> None:
    done = _run(script, "chief=1,worker=2,ps=1", "worker:0", "3", "9", "2", restarts=1)
    assert done.returncode == 0, done.stderr
    assert summary(done.stderr)["worker:0"] == "exited with status 3; restarted alone " \
        "(1 of 1); exited with status 3; not restarted"
    assert "task worker:0 exited with status 3; no restart left: training goes on without it" \
        in done.stderr


@pytest.mark.slow
def test_a_failed_chief_sets_the_status_or_restarts_the_whole_cluster(script: Path) -> None:
    done = _run(script, "chief=1,worker=1,ps=1", "chief:0", "3", "1", "0")
    assert done.returncode == 3
    assert "task chief:0 exited with status 3; stopping the other tasks" in done.stderr
    for name in ("worker:0", "ps:0"):
        assert summary(done.stderr)[name].startswith("stopped by the launcher")
    for f in (script.parent / "out").iterdir():
        f.unlink()
    done = _run(script, "chief=1,worker=1,ps=1", "chief:0", "3", "1", "0", restarts=1)
    assert done.returncode == 0, done.stderr
    assert "task chief:0 exited with status 3; restarting every task (restart 1 of 1)" \
        in done.stderr
    assert _started(script) == ["chief:0.0", "chief:0.1", "ps:0.0", "ps:0.1", "worker:0.0",
                                "worker:0.1"]
    assert summary(done.stderr)["ps:0"].startswith(
        "stopped by the launcher (was killed by signal 15 (SIGTERM)); restarted with the "
        "cluster (restart 1); stopped by the launcher")


@pytest.mark.slow
def test_the_chiefs_status_is_the_launchers(script: Path) -> None:
    done = _run(script, "chief=1,worker=1,ps=1", "none", "0", "0", "0", "4")
    assert done.returncode == 4
    assert summary(done.stderr)["chief:0"] == "exited with status 4"


# ------------------------------------------------------------ a lost evaluator
@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["chief=1,worker=1,ps=1,evaluator=1",
                                     "chief=1,worker=1,evaluator=1"], ids=["ps", "synchronous"])
def test_a_killed_evaluator_never_stops_training(script: Path, cluster: str) -> None:
    done = _run(script, cluster, "evaluator:0", "kill9", "1", "1")
    assert done.returncode == 0, done.stderr
    assert "task evaluator:0 was killed by signal 9 (SIGKILL); no --max-restarts: training " \
        "goes on without it" in done.stderr
    fates = summary(done.stderr)
    assert fates["evaluator:0"] == "was killed by signal 9 (SIGKILL); not restarted"
    assert fates["chief:0"] == fates["worker:0"] == "exited with status 0"


@pytest.mark.slow
def test_a_killed_evaluator_is_restarted_alone(script: Path) -> None:
    done = _run(script, "chief=1,worker=1,evaluator=1", "evaluator:0", "kill9", "1", "2",
                restarts=1)
    assert done.returncode == 0, done.stderr
    assert "task evaluator:0 was killed by signal 9 (SIGKILL); restarting it alone" \
        in done.stderr
    assert summary(done.stderr)["evaluator:0"] == "was killed by signal 9 (SIGKILL); " \
        "restarted alone (1 of 1); exited with status 0"
    assert _started(script) == ["chief:0.0", "evaluator:0.0", "evaluator:0.1", "worker:0.0"]
