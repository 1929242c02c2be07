"""The replica processes MirroredStrategy starts by running the program again.

* They begin with the random state the program had at ``import distrib``: numbers
  drawn from ``random``, numpy's global generator and torch before and after the
  strategy is created are the same in every replica (as in TensorFlow's one process).
* A program given with ``python -c`` is started again; one read from standard input
  cannot be, and says so at once with the fix instead of waiting out the timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import DEFAULT_TIMEOUT, clean_env, run_python

PROGRAM = Path(__file__).parent / "programs" / "random_state.py"

pytestmark = pytest.mark.slow


def replicas(out: Path) -> list[dict[str, object]]:
    return [json.loads((out / f"replica{r}.json").read_text()) for r in range(2)]


def test_replicas_draw_the_same_numbers_before_and_after_the_strategy(tmp_path: Path) -> None:
    proc = run_python([str(PROGRAM), str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = replicas(tmp_path)
    assert first == second


def test_torch_imported_after_distrib_draws_the_same_numbers(tmp_path: Path) -> None:
    program = PROGRAM.with_name("random_state_distrib_first.py")
    proc = run_python([str(program), str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = replicas(tmp_path)
    assert first == second
    assert first["before"]["loader"] == "SourceFileLoader"  # torch keeps its own loader


def test_a_program_given_with_dash_c_is_started_again(tmp_path: Path) -> None:
    code = PROGRAM.read_text()
    proc = run_python(["-c", code, str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = replicas(tmp_path)
    assert first == second


def test_a_program_read_from_standard_input_is_refused_at_once(tmp_path: Path) -> None:
    with PROGRAM.open() as stdin:
        proc = subprocess.run([sys.executable, "-", str(tmp_path)], stdin=stdin,
                              env=clean_env(OMP_NUM_THREADS="1"), capture_output=True,
                              text=True, timeout=DEFAULT_TIMEOUT)
    assert proc.returncode == 1
    assert "ConfigError: program = 'standard input'" in proc.stderr
    assert "save the program to a file" in proc.stderr and "distrib run" in proc.stderr
    assert list(tmp_path.iterdir()) == []
