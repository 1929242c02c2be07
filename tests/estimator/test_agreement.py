"""Replicas agree on stop requests, time-based saves and hook errors (2 local replicas)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_python

PROGRAM = Path(__file__).parent / "programs" / "agreement_program.py"


@pytest.mark.slow
def test_replicas_stop_save_and_fail_together(tmp_path: Path) -> None:
    proc = run_python([str(PROGRAM), str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    # A stop asked on replica 1 only (after step 2) stops both there.
    assert "stop: replica 0: global_step=3" in out and "stop: replica 1: global_step=3" in out
    # Checkpoints every 0.1 s of the chief's clock: every replica saves at the same steps.
    assert "secs: replica 0: global_step=12" in out and "secs: replica 1: global_step=12" in out
    state = json.loads((tmp_path / "secs" / "checkpoint").read_text())
    assert len(state["all"]) >= 2 and state["all"][-1] == "model.ckpt-12"
    # A hook failing on replica 1 only fails both, and neither hangs.
    assert "error: replica 1: failed: RuntimeError: this replica's hook failed" in out
    assert "error: replica 0: failed: PeerLostError: 1 other replica(s) failed in a hook" in out
