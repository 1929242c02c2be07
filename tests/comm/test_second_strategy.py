"""A second multi-replica strategy in one program is refused with a message that says why.

Each replica process belongs to one replica group; the second ``MirroredStrategy`` raises a
UsageError naming the devices and the fix (reuse the first strategy) on every replica,
starts no process, and leaves the first strategy working.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "two_strategies.py")


@pytest.mark.slow
def test_a_second_mirrored_strategy_is_refused_and_the_first_keeps_working(
        tmp_path: Path) -> None:
    proc = run_python([PROGRAM, str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    replicas = [json.loads((tmp_path / f"replica{r}.json").read_text()) for r in range(2)]
    for seen in replicas:
        kind, message = seen["second"]
        assert kind == "UsageError"
        assert "in the replica group of a strategy created earlier" in message
        assert "create the multi-replica strategy once and reuse that object" in message
        assert "['cpu:0', 'cpu:1']" in message               # the devices asked for
        assert seen["first_still_works"] == [2.0]
    assert sorted(tmp_path.iterdir()) == [tmp_path / "replica0.json", tmp_path / "replica1.json"]
