"""The fault-tolerance examples survive ``kill -9`` of a worker at a random step, bitwise."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tests.faults import run_with_kill, wait_dead
from tests.support import REPO

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.slow


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def _assert_bitwise_equal(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert len(wa) == len(wb)
    for x, y in zip(wa, wb):
        assert x.dtype == np.float64 or x.dtype == y.dtype
        assert np.array_equal(x, y)


@pytest.mark.parametrize("example, extra", [
    ("fault_tolerant_fit.py", ["--backup-dir", "backup", "--save-freq", "5"]),
    ("fault_tolerant_custom_loop.py", ["--checkpoint-dir", "ckpt", "--steps", "50"]),
])
def test_kill_9_of_a_worker_at_a_random_step_resumes_bitwise(tmp_path: Path, example: str,
                                                             extra: list[str]) -> None:
    script = str(EXAMPLES / example)
    (tmp_path / "ref").mkdir()
    (tmp_path / "hurt").mkdir()
    ref = run_with_kill(["run", "--cluster", "worker=2", script, *extra, "--out", "final.npz"],
                        tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    step = random.Random().randint(2, 45)
    hurt = run_with_kill(["run", "--cluster", "worker=2", "--max-restarts", "2", script,
                          *extra, "--out", "final.npz", "--trace", "--step-seconds", "0.05"],
                         tmp_path / "hurt", task="worker:1", step=step)
    assert hurt.killed is not None, hurt.stdout[-2000:]
    assert hurt.returncode == 0, f"killed at step {step}\n" + hurt.stderr[-4000:]
    assert "restart 1 of 2" in hurt.stderr and "was killed by signal 9" in hurt.stderr
    _assert_bitwise_equal(tmp_path / "ref" / "final.npz", tmp_path / "hurt" / "final.npz")
    if example == "fault_tolerant_fit.py":
        history = [json.loads((tmp_path / d / "final.npz.history.json").read_text())
                   for d in ("ref", "hurt")]
        assert history[0] == history[1]
        assert not (tmp_path / "hurt" / "backup").exists()  # deleted after success
    assert len(hurt.pids) >= 4  # two workers, started twice
    assert wait_dead(hurt.pids) == []
