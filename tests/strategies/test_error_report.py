"""A surviving replica reports distrib's error as one block at the user's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distrib.cluster.error_report import format_error, user_frames
from distrib.errors import PeerLostError
from tests.support import clean_env, run_python

PROGRAM = Path(__file__).parent / "programs" / "lost_peer_fit.py"
FIT_LINE = next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), start=1)
                if line.endswith("# FIT LINE"))


def _raise_lost() -> None:
    from distrib.comm import ops  # any distrib frame between the user and the raise

    try:
        ops.CommunicationOptions(timeout_seconds=-1)
    except ValueError as exc:
        raise PeerLostError("Lost task worker:1. Fix: restart it.", ["worker:1"]) from exc


def test_the_block_keeps_only_the_users_frames() -> None:
    try:
        _raise_lost()
    except PeerLostError as exc:
        error, tb = exc, exc.__traceback__
    frames = user_frames(tb)
    assert [f.name for f in frames] == ["test_the_block_keeps_only_the_users_frames",
                                        "_raise_lost"]
    assert all(f.filename == __file__ for f in frames)
    block = format_error(error, tb, "[rank 0/2]").splitlines()
    assert block[-1] == ("[rank 0/2] distrib.errors.PeerLostError: Lost task worker:1. "
                         "Fix: restart it.")
    assert all(line.startswith("[rank 0/2] ") for line in block)
    assert f'File "{__file__}"' in block[1]
    assert not any("CommunicationOptions" in line for line in block)  # the hidden cause
    assert error.__cause__ is not None  # kept for debugging


def test_without_user_frames_the_block_is_one_line() -> None:
    assert format_error(PeerLostError("gone"), None, "[rank 1/2]") == \
        "[rank 1/2] distrib.errors.PeerLostError: gone\n"


_HOOKED = """
import sys
from distrib.cluster import error_report
from distrib.errors import UnmatchedCallError
error_report.install("[rank 1/2]")
def users_function():
    error = UnmatchedCallError("replica 0 ended its program without Model.save.")
    if sys.argv[1] == "distrib":
        raise error from KeyError("engine detail")
    raise ValueError("the user's own error")
users_function()
"""


@pytest.mark.parametrize("kind,debug", [("distrib", ""), ("distrib", "1"), ("user", "")])
def test_the_hook_shortens_only_distribs_errors(tmp_path: Path, kind: str, debug: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(_HOOKED)
    proc = subprocess.run([sys.executable, str(script), kind], cwd=tmp_path,
                          env=clean_env(DISTRIB_DEBUG=debug), capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    if kind == "distrib" and not debug:
        assert lines == [
            "[rank 1/2] Traceback (most recent call last; distrib's frames hidden, "
            "DISTRIB_DEBUG=1 shows all):",
            f'[rank 1/2]   File "{script}", line 11, in <module>',
            "[rank 1/2]     users_function()",
            f'[rank 1/2]   File "{script}", line 9, in users_function',
            "[rank 1/2]     raise error from KeyError(\"engine detail\")",
            "[rank 1/2] distrib.errors.UnmatchedCallError: replica 0 ended its program "
            "without Model.save."]
    else:  # Python's own traceback, chained cause included
        assert lines[0] in ("Traceback (most recent call last):", "KeyError: 'engine detail'")
        assert lines[-1] == ("ValueError: the user's own error" if kind == "user" else
                             "distrib.errors.UnmatchedCallError: replica 0 ended its program "
                             "without Model.save.")
        assert ("engine detail" in proc.stderr) == (kind == "distrib")


def _assert_one_block(lines: list[str], error: str) -> None:
    """A traceback header, the user's frames (the program's fit line last), the error."""
    assert lines[0].startswith("[rank 0/2] Traceback (most recent call last; distrib's "
                               "frames hidden, DISTRIB_DEBUG=1 shows all)"), lines
    files = [line for line in lines if line.startswith('[rank 0/2]   File "')]
    assert files[-1] == f'[rank 0/2]   File "{PROGRAM}", line {FIT_LINE}, in <module>', lines
    assert not any("/distrib/" in line or "/torch/" in line for line in files), lines
    assert lines[-1].startswith(f"[rank 0/2] distrib.errors.{error}"), lines
    assert sum("Error" in line for line in lines) == 1 and len(lines) <= 8, lines


@pytest.mark.slow
def test_a_lost_peer_prints_one_block_on_the_survivor() -> None:
    proc = run_python([str(PROGRAM), "kill"], env=clean_env())
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    # replica 1 was killed and printed nothing: every line is the survivor's one block
    assert all(line.startswith("[rank 0/2] ") for line in lines), proc.stderr
    _assert_one_block(lines, "PeerLostError: Lost task replica 1 (rank 1/2) while running "
                             "the replica function")
    assert "Fix: restart every task" in lines[-1]
    assert "[rank0]: Traceback" not in proc.stderr and "gloo" not in proc.stderr


@pytest.mark.slow
def test_the_users_error_keeps_its_traceback_and_the_survivor_names_it() -> None:
    proc = run_python([str(PROGRAM), "raise"], env=clean_env())
    assert proc.returncode != 0
    mine = [line for line in proc.stderr.splitlines() if line.startswith("[rank 0/2] ")]
    theirs = [line for line in proc.stderr.splitlines() if line.startswith("[rank1]: ")]
    _assert_one_block(mine, "ReplicaFailedError: replica 1 (rank 1/2) raised ValueError: "
                            "replica 1 failed on purpose")
    # the user's own exception: Python's full traceback (torch's [rankN]: prefix), to the raise
    assert theirs[0] == "[rank1]: Traceback (most recent call last):"
    assert theirs[-1] == "[rank1]: ValueError: replica 1 failed on purpose"
    assert any(f'File "{PROGRAM}"' in line and "on_train_batch_end" in line for line in theirs)
    assert "[rank0]:" not in proc.stderr
