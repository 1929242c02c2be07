"""A checkpoint written on one supported interpreter restores on every other.

``make test-cross-interpreter`` lists every environment ``make test`` builds (the pinned,
floor and newest torch, Python 3.10, 3.12, 3.13 and Debian's own python3) in
``DISTRIB_TEST_INTERPRETERS``; each must exist then. Without it, the test takes the
running interpreter and whichever of those environments this checkout has built.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, clean_env

PROGRAM = REPO / "tests" / "checkpoint" / "programs" / "interpreter_roundtrip.py"
ENVIRONMENTS = (".venv", ".venv-floor", ".venv-newest", ".venv-py3.10", ".venv-py3.12",
                ".venv-py3.13", ".venv-system")


def _interpreters() -> list[str]:
    listed = os.environ.get("DISTRIB_TEST_INTERPRETERS", "").split()
    if listed:
        missing = [p for p in listed if not Path(p).exists()]
        assert not missing, f"DISTRIB_TEST_INTERPRETERS names missing interpreters: {missing}"
        return listed
    found = [str(REPO / env / "bin" / "python") for env in ENVIRONMENTS
             if (REPO / env / ".installed").exists()]
    return list(dict.fromkeys([sys.executable, *found]))


def _run(python: str, *args: str) -> str:
    proc = subprocess.run([python, str(PROGRAM), *args], env=clean_env(), text=True,
                          capture_output=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, f"{python} {args[0]} failed:\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow
def test_every_interpreter_restores_every_other_interpreters_checkpoints(
        tmp_path: Path) -> None:
    interpreters = _interpreters()
    if len(interpreters) < 2:
        pytest.skip("one interpreter only: `make test-cross-interpreter` builds the others")
    names = [f"written-by-{i}" for i in range(len(interpreters))]
    for python, name in zip(interpreters, names):
        _run(python, "save", str(tmp_path), name)
    for python in interpreters:
        out = _run(python, "restore", str(tmp_path), *names)
        assert out.count("restored ") == len(names), (python, out)
