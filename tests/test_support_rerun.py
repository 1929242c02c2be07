"""The suite's one rerun rule, for programs run by fixtures: only torch's abort at exit."""

from __future__ import annotations

from pathlib import Path

from tests.support import EXIT_ABORT, run_python

PROGRAM = """
import sys
from pathlib import Path
marker = Path(sys.argv[1])
first = not marker.exists()
marker.write_text("ran")
if first:
    print({message!r}, file=sys.stderr)
    sys.exit(134)
"""


def _program(tmp_path: Path, message: str) -> list[str]:
    script = tmp_path / "once.py"
    script.write_text(PROGRAM.format(message=message))
    return [str(script), str(tmp_path / "marker")]


def test_a_run_that_hit_the_exit_abort_runs_once_more(tmp_path: Path) -> None:
    assert run_python(_program(tmp_path, EXIT_ABORT)).returncode == 0


def test_any_other_failure_is_not_run_again(tmp_path: Path) -> None:
    proc = run_python(_program(tmp_path, "RuntimeError: a real failure"))
    assert proc.returncode == 134 and "a real failure" in proc.stderr
