"""Checkpoints of sharded models reshard: written by ShardedStrategy on 2 shards through
distrib.Checkpoint (DCP), restored exactly on 2 and 3 shards, under ModelParallel, into
MirroredStrategy and into one process, and training goes on exactly as it would have
(programs/sharded_checkpoint.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_python

PROGRAM = str(Path(__file__).parent / "programs" / "sharded_checkpoint.py")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sharded-ckpt")
    proc = run_python([PROGRAM, "save", str(folder)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("saved replicas=2") == 2
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("phase,replicas", [("one", 1), ("mirrored", 2), ("sharded", 2),
                                            ("sharded3", 3), ("model_parallel", 2)])
def test_a_checkpoint_of_two_shards_restores_exactly(saved: Path, phase: str,
                                                     replicas: int) -> None:
    proc = run_python([PROGRAM, phase, str(saved)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count(f"restored replicas={replicas}") == replicas
    report = json.loads((saved / f"{phase}.json").read_text())
    assert report["replicas"] == replicas
    assert report["restored"] == 0.0  # parameters and Adam's moments, bit for bit
    assert report["after"] < 1e-12   # three more steps land where the saving run did
