"""distrib.cluster.supervisor: the one way distrib starts and stops child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrib.cluster.supervisor import exit_reason, exit_status, start_process, stop_processes

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
    "print('ready', flush=True); time.sleep(600)"


def _ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"


def test_exit_reasons_and_statuses() -> None:
    assert [exit_reason(c) for c in (0, 3, -9)] == [
        "exited with status 0", "exited with status 3", "was killed by signal 9 (SIGKILL)"]
    assert [exit_status(c) for c in (0, 3, -9, -15)] == [0, 3, 137, 143]


@pytest.mark.parametrize("group", [True, False], ids=["own_group", "same_group"])
def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(group: bool) -> None:
    proc = start_process([sys.executable, "-c", STUBBORN], own_group=group,
                         stdout=subprocess.PIPE)
    _ready(proc)
    quick = start_process([sys.executable, "-c", "print('ready', flush=True)"],
                          own_group=group, stdout=subprocess.PIPE)
    _ready(quick)
    quick.wait()  # ended before the stop: its status is kept
    stop_processes([proc, quick], grace=0.5, group=group)
    assert proc.returncode == -signal.SIGKILL
    assert quick.returncode == 0
    for p in (proc, quick):
        assert p.stdout is not None
        p.stdout.close()


def test_patience_lets_a_child_finish_by_itself(tmp_path: Path) -> None:
    proc = start_process([sys.executable, "-c", "import time; time.sleep(0.3)"])
    stop_processes([proc], grace=0.5, patience=60.0)
    assert proc.returncode == 0  # it ended before any signal


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(f"""
        import sys, time
        from distrib.cluster.supervisor import start_process
        child = start_process([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("ready", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE)
    try:
        _ready(proc)  # type: ignore[arg-type]
        child = int(pid_file.read_text())
        proc.kill()
        proc.wait()
        for _ in range(2400):   # the kernel sends the child SIGKILL at once
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except OSError:
                break
            if stat.split(")")[-1].split()[0] == "Z":
                break
            subprocess.run(["sleep", "0.05"], check=True)
        else:
            pytest.fail(f"child {child} outlived its parent")
    finally:
        if proc.poll() is None:
            proc.kill()
        assert proc.stdout is not None
        proc.stdout.close()
