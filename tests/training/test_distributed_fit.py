"""``fit`` under real strategies ends where one process on the global batch ends (the oracle contract).

programs/fit_program.py runs unchanged on one process (the oracle), under
OneDeviceStrategy, MirroredStrategy(["cpu:0", "cpu:1"]) and two TF_CONFIG workers:
same final weights, same per-epoch loss/metric history (training and validation),
same evaluation and the same predictions — every example once, in order — on every
replica, with a final partial batch in training and validation (float64, 1e-9).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "fit_program.py")
TOL = 1e-9


def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("oracle") / "oracle.pt"
    proc = run_python([PROGRAM, "oracle", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return _load(Path(f"{out}.rank0"))


def _compare(oracle: dict[str, Any], got: dict[str, Any]) -> None:
    for key, expected in oracle["weights"].items():
        diff = (got["weights"][key] - expected).abs().max().item()
        assert diff < TOL, f"weight {key}: max abs diff {diff}"
    assert set(got["history"]) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    for key, values in oracle["history"].items():
        assert len(got["history"][key]) == len(values) == 3
        for a, b in zip(values, got["history"][key]):
            assert abs(a - b) < TOL, f"history {key}: {values} vs {got['history'][key]}"
    for key, value in oracle["evaluate"].items():
        assert abs(got["evaluate"][key] - value) < TOL, key
    assert got["predict"].shape == oracle["predict"].shape == (30, 10)
    assert (got["predict"] - oracle["predict"]).abs().max().item() < TOL


def _check_checkpoints(directory: Path, oracle: dict[str, Any]) -> None:
    """ModelCheckpoint under a strategy: one file per epoch, whole, no temporary left."""
    names = sorted(p.name for p in directory.iterdir() if ".ckpt-" in p.name)
    assert names == [f"run.pt.ckpt-{e}.pt" for e in (1, 2, 3)], sorted(directory.iterdir())
    assert not [p for p in directory.iterdir() if p.name.startswith(".tmp")]
    last = _load(directory / "run.pt.ckpt-3.pt")
    for key, expected in oracle["weights"].items():
        assert (last[key] - expected).abs().max().item() < TOL


@pytest.mark.slow
@pytest.mark.parametrize("mode,replicas", [("one_device", 1), ("mirrored", 2)])
def test_fit_on_one_machine_matches_the_oracle(mode: str, replicas: int,
                                               oracle: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "run.pt"
    proc = run_python([PROGRAM, mode, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count(f"done replicas={replicas}") == replicas
    for rank in range(replicas):  # every replica logs and predicts the same global values
        _compare(oracle, _load(Path(f"{out}.rank{rank}")))
    _check_checkpoints(tmp_path, oracle)


@pytest.mark.slow
def test_fit_on_two_tf_config_workers_matches_the_oracle(oracle: dict[str, Any],
                                                         tmp_path: Path) -> None:
    out = tmp_path / "run.pt"
    results = wait_all(start_cluster([PROGRAM, "multi_worker", str(out)],
                                     localhost_cluster(worker=2)))
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
    for rank in range(2):
        _compare(oracle, _load(Path(f"{out}.rank{rank}")))
    _check_checkpoints(tmp_path, oracle)


@pytest.mark.slow
def test_float16_inf_gradient_skips_the_step_and_halves_the_scale_on_every_replica(
        tmp_path: Path) -> None:
    out = tmp_path / "fp16"
    proc = run_python([PROGRAM, "fp16_inf", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in range(2):
        got = Path(f"{out}.rank{rank}").read_text()
        assert got == "scale=16384.0 unchanged=True", (rank, got, proc.stderr[-2000:])
