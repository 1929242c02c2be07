"""Programs started from a warm interpreter behave as after ``python program.py``."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests import forked
from tests.support import clean_env

PROGRAM = '''
import json, os, random, sys
import numpy
print(json.dumps({"argv": sys.argv, "orig_argv": sys.orig_argv[1:], "cwd": os.getcwd(),
                  "env": os.environ.get("FORKED_TEST"), "name": __name__,
                  "file": __file__, "path0": sys.path[0], "random": random.random(),
                  "numpy": float(numpy.random.rand()), "stdin": sys.stdin.read()}))
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("boom")
if mode == "exit":
    sys.exit(3)
if mode == "sleep":
    import time
    time.sleep(60)
'''


def _program(tmp_path: Path) -> str:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return str(path)


def test_a_forked_program_gets_its_own_argv_environment_directory_and_main(
        tmp_path: Path) -> None:
    program = _program(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    proc = forked.run([program, "ok", "x"], clean_env(FORKED_TEST="1"), cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == [program, "ok", "x"] and seen["orig_argv"] == [program, "ok", "x"]
    assert (seen["cwd"], seen["env"], seen["name"]) == (str(work), "1", "__main__")
    assert seen["file"] == program and seen["path0"] == str(tmp_path)
    assert seen["stdin"] == "" and proc.stderr == "to stderr\n"
    again = json.loads(forked.run([program, "ok"], clean_env(), timeout=120).stdout)
    assert again["env"] is None  # nothing of the previous program's environment
    # reseeded from the OS, as a fresh interpreter is
    assert (again["random"], again["numpy"]) != (seen["random"], seen["numpy"])


def test_exit_codes_tracebacks_and_signals_are_the_interpreters(tmp_path: Path) -> None:
    program = _program(tmp_path)
    raised = forked.run([program, "raise"], clean_env(), timeout=120)
    assert raised.returncode == 1 and raised.stderr.rstrip().endswith("ValueError: boom")
    assert forked.run([program, "exit"], clean_env(), timeout=120).returncode == 3
    sleeping = forked.popen([program, "sleep"], clean_env())
    assert isinstance(sleeping, forked.Forked)
    assert sleeping.poll() is None
    sleeping.send_signal(signal.SIGKILL)
    assert sleeping.wait(timeout=60) == -signal.SIGKILL
    sleeping.communicate()


def test_start_up_variables_choose_the_interpreter_and_other_commands_start_fresh(
        tmp_path: Path) -> None:
    program = _program(tmp_path)
    # (the settings other tests use too: the same warm interpreters serve them)
    unset = {k: v for k, v in clean_env().items() if k != "OMP_NUM_THREADS"}
    forked.run([program, "ok"], unset, timeout=120)
    forked.run([program, "ok"], clean_env(OMP_NUM_THREADS="1"), timeout=120)
    keys = {dict(key).get("OMP_NUM_THREADS") for key in forked._servers}
    assert {None, "1"} <= keys
    fresh = forked.popen(["-c", "print(1)"], clean_env())
    assert isinstance(fresh, subprocess.Popen)
    assert fresh.communicate(timeout=120) == ("1\n", "")
