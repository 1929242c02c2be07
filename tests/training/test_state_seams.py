"""Loading goes through the strategy's state-dict seams: a ShardedStrategy model on 2
replicas gets the full saved tensors from ``load_weights``, ``Model.load``,
``distrib.models.load_model`` and the Estimator's warm start, bit for bit, and
``Model.save`` / ``Model.load`` / ``load_model`` keep the optimizer's full slots
(programs/state_seams.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_python

PROGRAM = str(Path(__file__).parent / "programs" / "state_seams.py")


@pytest.mark.slow
def test_every_load_path_gives_a_sharded_model_the_full_saved_state(tmp_path: Path) -> None:
    proc = run_python([PROGRAM, str(tmp_path)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("loaded replicas=2") == 2
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["replicas"] == 2
    for path in ("load_weights", "load", "warm_start"):
        assert report[f"{path}_before"] > 0.0  # the fresh model differed before loading
        assert report[path] == 0.0, path
    assert report["load_model"] == 0.0
    assert report["optimizer_load"] == 0.0 and report["optimizer_load_model"] == 0.0
